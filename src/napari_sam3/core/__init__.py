"""The contract with the model repository and the checks every input passes."""
