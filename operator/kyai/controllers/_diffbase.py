"""kopf's diff base as a digest: a few dozen bytes per object instead of a copy of its spec.

kopf keeps the "essence" of the last handled state of each object (its spec, labels and
annotations) to tell an update from a no-op and to give handlers ``old``/``new``/``diff``.
Stored as it is (``AnnotationsDiffBaseStorage``), that is a second copy of the spec in an
annotation: a Snapshot with 1,000 inline rows carried 282 KB of annotations with kubectl's
own copy, over the API server's 256 KiB limit. The operator's handlers reconcile from the
object itself and never read the diff, so the essence kept here is only the sha256 of the
real one: any change of spec, labels or annotations still changes it (an update), and a
status-only change still does not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, cast

import kopf

#: The key of the digest inside the stored essence.
DIGEST_FIELD = "sha256"


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """``AnnotationsDiffBaseStorage`` storing ``{"spec": {"sha256": <digest of the essence>}}``."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        if not extra_fields:
            # kopf deep-copies the whole body and then drops the status: a run's status (its
            # conditions, scores, plan) was most of that copy, on every watch event. Without
            # the status the essence is the same.
            body = kopf.Body(cast(kopf.RawBody, {k: v for k, v in body.items() if k != "status"}))
        essence = super().build(body=body, extra_fields=extra_fields)
        text = json.dumps(essence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return cast(kopf.BodyEssence, {"spec": {DIGEST_FIELD: digest}})
