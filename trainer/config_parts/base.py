"""The strict pydantic base every TrainConfig section derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """`extra="forbid"`: a typo in a recipe is an error, not a silent default;
    `validate_assignment`: a value set after construction is checked too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
