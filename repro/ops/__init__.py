"""Numerical kernels the models call, apart from the models themselves.

``conv``: the symmetric 'same' 1-D convolution of the follow-up study's bounded-kernel layer
(its implementations and the ``auto`` chooser); ``fft``, ``toeplitz``, ``split_precision``: the
implementations other than cuDNN's own kernels.
"""
