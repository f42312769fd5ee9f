"""The schedule stage: a kernel's schedule as plain data (`Config`), the
space of valid schedules, a default heuristic, and lowering to the loop IR.

>>> from neoflow.schedule import default_config, lower_program
>>> cfg = default_config(kernel); cfg.to_json()
"""
from .config import Config, ConfigError, StageConfig, validate
from .default import default_config
from .lower import lower_kernel, lower_program
from .space import ConfigSpace, config_space, sample_config
from .stage import Stage

__all__ = ["Config", "ConfigError", "ConfigSpace", "Stage", "StageConfig", "config_space",
           "default_config", "lower_kernel", "lower_program", "sample_config", "validate"]
