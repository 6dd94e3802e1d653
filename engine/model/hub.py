"""`--weights` and `--tokenizer` sources: a local path, or a Hugging Face Hub id `org/name[@REV]`.

A path that exists locally always wins. Otherwise `org/name` (optionally `@REV`: a branch, tag or
commit) is fetched with `huggingface_hub` into its standard cache (HF_HUB_CACHE), resumably, with
a progress bar, downloading only the files the engine reads; HF_HUB_OFFLINE=1 and HF_TOKEN are
honoured by the library. `vikhyatk/moondream2` without a revision means `2025-06-21`, the first
release with the starmie tokenizer that the engine's prompt ids assume.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.model.checkpoint import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CheckpointError

#: Pinned revisions: an unpinned id would follow whatever the repository's main branch holds.
DEFAULT_REVISIONS: dict[str, str] = {"vikhyatk/moondream2": "2025-06-21"}
MOONDREAM2_ID = "vikhyatk/moondream2"
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Source:
    """Where files come from: a local `path`, or Hub `repo_id` at `revision`."""

    path: Path | None = None
    repo_id: str | None = None
    revision: str | None = None

    @property
    def label(self) -> str:
        """What the start-up line names: the path, or `org/name@REV`."""
        if self.path is not None:
            return str(self.path)
        return f"{self.repo_id}@{self.revision}" if self.revision else str(self.repo_id)


def parse_source(spec: str | Path, revision: str | None = None) -> Source:
    """A local path when it exists (or does not look like `org/name[@REV]`), else a Hub id."""
    text = str(spec)
    if isinstance(spec, Path) or Path(text).expanduser().exists():
        if revision is not None:
            raise CheckpointError(f"--revision applies to a Hub id, but {text!r} is a local path")
        return Source(path=Path(text).expanduser())
    repo_id, at, rev = text.partition("@")
    if not _HUB_ID.fullmatch(repo_id) or (at and not rev) or repo_id.count("/") != 1:
        return Source(path=Path(text).expanduser())   # reported as a missing directory by the loader
    if at and revision is not None and rev != revision:
        raise CheckpointError(f"{text!r} names revision {rev!r} but --revision says {revision!r}; give one")
    return Source(repo_id=repo_id, revision=rev or revision or DEFAULT_REVISIONS.get(repo_id))


def download(source: Source, files: tuple[str, ...], *, required: tuple[str, ...] = ()) -> Path:
    """The snapshot directory of `source` holding `files` (those present in the repository).

    Raises CheckpointError with the fix when the repository, the revision or a `required` file is
    missing, when offline without a cached copy, or on a network failure.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub import errors as hub_errors

    label = source.label
    offline = constants.HF_HUB_OFFLINE
    try:
        folder = Path(snapshot_download(source.repo_id, revision=source.revision, allow_patterns=list(files)))
    except hub_errors.GatedRepoError:
        raise CheckpointError(f"{label} is gated: accept its terms on huggingface.co, then set HF_TOKEN "
                              "(or run `hf auth login`)") from None
    except hub_errors.RevisionNotFoundError:
        raise CheckpointError(f"{label}: the revision {source.revision!r} does not exist on the Hub; "
                              "pass an existing branch, tag or commit after '@'") from None
    except hub_errors.RepositoryNotFoundError:
        raise CheckpointError(f"{label}: no such repository on the Hub (or it is private: set HF_TOKEN); "
                              "pass an existing org/name or a local directory") from None
    except hub_errors.LocalEntryNotFoundError:
        raise CheckpointError(_not_cached(label, files, offline)) from None
    except (OSError, hub_errors.HfHubHTTPError, ValueError) as e:
        first = " ".join(str(e).split())[:200]
        raise CheckpointError(f"cannot download {label} from the Hugging Face Hub ({type(e).__name__}: {first}); "
                              "check the network, or set HF_HUB_OFFLINE=1 to use the cache") from None
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        if offline:
            raise CheckpointError(_not_cached(label, tuple(missing), offline))
        raise CheckpointError(f"{label} has no {', '.join(missing)} at this revision; pass another revision "
                              "(org/name@REV) or a local directory")
    return folder


def _not_cached(label: str, files: tuple[str, ...], offline: bool) -> str:
    why = "HF_HUB_OFFLINE=1 is set" if offline else "the Hub cannot be reached"
    return (f"{label}: {', '.join(files)} not in the Hugging Face cache and {why}; download it once online "
            "(unset HF_HUB_OFFLINE) or pass a local directory")


def checkpoint_dir(source: Source) -> Path:
    """The local checkpoint directory for `source` (downloaded first for a Hub id)."""
    if source.path is not None:
        return source.path
    return download(source, (WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE), required=(WEIGHTS_FILE,))


def tokenizer_file(source: Source) -> Path:
    """The local tokenizer.json for `source`: the file itself, one inside a directory, or from the Hub."""
    if source.path is not None:
        return source.path / TOKENIZER_FILE if source.path.is_dir() else source.path
    return download(source, (TOKENIZER_FILE,), required=(TOKENIZER_FILE,)) / TOKENIZER_FILE
