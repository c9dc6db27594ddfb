"""TensorFlow's error classes (``tf.errors``), raised with Troupe's message.

Each C++ error code maps to the class TensorFlow raises for the same condition:
invalid_argument -> InvalidArgumentError, not_found -> NotFoundError, io_error ->
UnknownError, data_loss -> DataLossError, out_of_range -> OutOfRangeError, unavailable ->
UnavailableError, cancelled -> CancelledError, internal -> InternalError,
permission_denied -> PermissionDeniedError.
"""


class OpError(Exception):
    """The base of Troupe's errors, as ``tf.errors.OpError``: ``message`` says what failed
    and names the input at fault; ``error_code`` is TensorFlow's code for the class."""

    error_code = 2

    def __init__(self, message, *args):
        super().__init__(message, *args)
        self.message = message

    def __str__(self):
        return self.message


class CancelledError(OpError):
    error_code = 1


class UnknownError(OpError):
    error_code = 2


class InvalidArgumentError(OpError):
    error_code = 3


class DeadlineExceededError(OpError):
    error_code = 4


class NotFoundError(OpError):
    error_code = 5


class PermissionDeniedError(OpError):
    error_code = 7


class OutOfRangeError(OpError):
    error_code = 11


class InternalError(OpError):
    error_code = 13


class UnavailableError(OpError):
    error_code = 14


class DataLossError(OpError):
    error_code = 15


_BY_CODE_NAME = {
    "invalid_argument": InvalidArgumentError,
    "not_found": NotFoundError,
    "io_error": UnknownError,
    "data_loss": DataLossError,
    "out_of_range": OutOfRangeError,
    "unavailable": UnavailableError,
    "cancelled": CancelledError,
    "internal": InternalError,
    "permission_denied": PermissionDeniedError,
}


def error_class(code_name):
    """The class raised for a C++ error code (core::errc_name); UnknownError for others."""
    return _BY_CODE_NAME.get(code_name, UnknownError)
