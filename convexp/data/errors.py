"""Data errors a user can fix; each message is one line naming the problem and the fix."""

from ..errors import UserError


class DataError(UserError):
    """A corpus, file or tokenizer problem (the base of the classes below)."""


class DataPathError(DataError):
    """A path that does not exist, or a folder without supported files."""


class EmptyCorpusError(DataError):
    """A corpus with no non-blank document."""


class MissingFieldError(DataError):
    """A json/jsonl/parquet corpus without the configured text field."""


class UnknownSourceError(DataError):
    """``data.source`` is not synthetic, hub or files."""


class HubDatasetError(DataError):
    """A hub dataset that cannot be loaded (offline, unknown name or config)."""


class TokenizerError(DataError):
    """A tokenizer that cannot be built or loaded (bad kind, missing file, missing special token)."""


class TaskError(DataError):
    """A fine-tuning task, file or label problem (GLUE, SentEval probing, a custom task)."""


class UnknownTaskError(TaskError):
    """A task name that is not in the task registry."""


class TaskFileError(TaskError):
    """A missing task file, a file with the wrong columns, or a malformed row."""


class TaskLabelError(TaskError):
    """A label that the task does not know."""
