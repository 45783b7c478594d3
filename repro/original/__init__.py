"""The LRA study's own models: its attention mechanisms (``attention``) and the Transformer encoder they plug into."""
