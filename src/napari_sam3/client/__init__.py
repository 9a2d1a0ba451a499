"""The client: Sam3Client (Triton or embedded), its feature cache, image handles, interactive sessions, result tables."""
