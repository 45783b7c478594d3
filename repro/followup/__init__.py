"""The follow-up study's models (bounded convolution, rotary Transformer, gMLP, S4, S5, MEGA) and techniques."""
