"""Prompts: keyword text, the tokenizer, portable concepts, vector files as boxes and points."""
