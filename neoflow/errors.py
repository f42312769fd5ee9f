"""Errors a user can cause. Every one is a NeoFlowError; messages name the
tensor, the dimension and what was expected."""


class NeoFlowError(Exception):
    """Base class of every error NeoFlow raises on bad input."""


class ExpressionError(NeoFlowError):
    """A malformed tensor expression (caught at construction)."""


class DTypeError(ExpressionError):
    """Operands or indices of the wrong dtype."""


class ShapeError(ExpressionError):
    """A shape or an index count that does not fit."""


class InputError(NeoFlowError):
    """A value passed to a built function, the evaluator or a trainer does not fit."""


class OutOfBoundsError(NeoFlowError):
    """A read outside a tensor (e.g. a gather index out of range)."""


class GradError(NeoFlowError):
    """A gradient that cannot be formed as asked."""


class BuildError(NeoFlowError):
    """Generated code failed to compile or load."""


class CompilerNotFoundError(BuildError):
    """No system C compiler was found."""


class MissingDependencyError(NeoFlowError):
    """An optional Python package a feature needs is not installed."""


def require(module, pip, needed_by):
    """Import the optional package `module` and return it; when it is not
    installed, raise MissingDependencyError naming it, what needs it and the
    command that installs it.

    >>> torch = require("torch", "pip install torch", "the zoo benchmark")  # doctest: +SKIP
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"{needed_by} needs the '{module}' Python package ({pip})") from e
