"""gpuforge: GPU clusters on AWS as code, proven before anyone trains on them."""

__version__ = "0.1.0"
