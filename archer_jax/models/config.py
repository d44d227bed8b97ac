"""Model configs mirrored from Hugging Face ``config.json`` files."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar


@dataclasses.dataclass(frozen=True)
class HFConfig:
    """Base of the frozen, hashable model configs (usable as static jit arguments).

    Subclasses list the ``config.json`` fields the model needs, with Hugging Face's defaults.
    """

    model_type: ClassVar[str]
    architecture: ClassVar[str]

    @classmethod
    def from_hf_dict(cls, config: dict[str, Any]) -> "HFConfig":
        """Builds the config from a parsed ``config.json``; fields it lacks take HF defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names})

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` content that Hugging Face's PyTorch class reads back."""
        return {"model_type": self.model_type, "architectures": [self.architecture], **dataclasses.asdict(self)}

    def replace(self, **changes: Any) -> "HFConfig":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)
