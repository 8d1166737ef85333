"""A fake of huggingface_hub's `HfApi` for the push tests: one place for what several test files record.

`FakeHfApi` talks to no Hub. It records every call as ``(method name, kwargs)`` (a positional ``repo_id`` is recorded
as a keyword) and keeps what each `upload_folder` call's folder held at upload time (relative path -> bytes), so a
test reads what was pushed after the pushing code has removed its staging folder. It returns what the package
reads of the real API's results: `create_repo` a `RepoUrl` (whose ``repo_id`` resolves a bare name to the
``namespace`` user, as the Hub does), `upload_folder` a `CommitInfo` for that repo.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from huggingface_hub import CommitInfo, RepoUrl

ENDPOINT = "https://huggingface.co"
#: Where each repo type lives below the endpoint.
URL_PREFIX = {None: "", "model": "", "dataset": "datasets/", "space": "spaces/"}


class FakeHfApi:
    """Records create_repo / create_branch / upload_folder calls and the files of each uploaded folder."""

    def __init__(self, namespace: str = "someone") -> None:
        self.namespace = namespace
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.uploads: list[dict[str, bytes]] = []  # one per upload_folder call: relative path -> bytes
        self.commits: list[CommitInfo] = []  # what each upload_folder call returned

    def repo_url(self, repo_id: str, repo_type: str | None = None) -> RepoUrl:
        """The repo's URL, a bare name in the ``namespace`` user's namespace."""
        full = repo_id if "/" in repo_id else f"{self.namespace}/{repo_id}"
        return RepoUrl(f"{ENDPOINT}/{URL_PREFIX[repo_type]}{full}", endpoint=ENDPOINT)

    def create_repo(self, repo_id: str, **kwargs: Any) -> RepoUrl:
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
        return self.repo_url(repo_id, kwargs.get("repo_type"))

    def create_branch(self, repo_id: str, **kwargs: Any) -> None:
        self.calls.append(("create_branch", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, **kwargs: Any) -> CommitInfo:
        self.calls.append(("upload_folder", kwargs))
        folder = Path(kwargs["folder_path"])
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.uploads.append(files)
        oid = hashlib.sha1(b"".join(name.encode() + b"\0" + data for name, data in files.items())).hexdigest()
        url = self.repo_url(kwargs["repo_id"], kwargs.get("repo_type"))
        commit = CommitInfo(
            commit_url=f"{url}/commit/{oid}", commit_message=kwargs.get("commit_message") or "",
            commit_description=kwargs.get("commit_description") or "", oid=oid, _endpoint=ENDPOINT,
            pr_url=f"{url}/discussions/{len(self.commits) + 1}" if kwargs.get("create_pr") else None,
        )
        self.commits.append(commit)
        return commit

    # ------------------------------------------------------------------------------------------ views
    @property
    def names(self) -> list[str]:
        """The methods called, in order."""
        return [name for name, _ in self.calls]

    @property
    def files(self) -> dict[str, bytes]:
        """The last uploaded folder's files (relative path -> bytes); empty before any upload."""
        return self.uploads[-1] if self.uploads else {}

    def text(self, name: str) -> str:
        """The last upload's file ``name`` as UTF-8 text."""
        return self.files[name].decode("utf-8")

    def top_level_text(self) -> dict[str, str]:
        """The last upload's top-level files (not those in subfolders) as text, undecodable bytes replaced."""
        return {name: data.decode("utf-8", errors="replace") for name, data in self.files.items() if "/" not in name}

    def write_upload(self, into: Path) -> Path:
        """Write the last uploaded folder's files below ``into`` (a local stand-in for the pushed repo)."""
        for name, data in self.files.items():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes(data)
        return into
