"""gpuforge: GPU clusters on AWS as code, proven before anyone trains on them."""

from gpuforge.common.version import __version__

__all__ = ["__version__"]
