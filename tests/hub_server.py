"""A small Hugging Face Hub-compatible HTTP server for tests (standard library only).

It implements what `huggingface_hub` 2.4 and `transformers` use to push and load models: repo creation, branches,
YAML validation, the preupload and NDJSON commit endpoints (regular, non-LFS uploads only: preupload answers
`uploadMode: "regular"` so no Xet/LFS transfer is attempted), repo info by revision, the tree listing and
`HEAD`/`GET /{repo}/resolve/{revision}/{path}` with `X-Repo-Commit`, `ETag` and `Content-Length`. Errors carry
`X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) as the real Hub does, so the client raises its
own typed errors.

Revisions arrive URL-quoted (`refs%2Fpr%2F1`); every response has a Content-Length (HTTP/1.1 keep-alive). A server
exception looks like a dropped connection to the client, which then retries for half a minute: handler exceptions
are logged to stderr, answered with a 500 that says what failed, and kept in `HubServer.errors` for the tests.

    with HubServer() as hub:          # 127.0.0.1, port 0
        os.environ["HF_ENDPOINT"] = hub.url   # before huggingface_hub is imported
"""

import base64
import hashlib
import json
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, as the Hub reports for regular (non-LFS) files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    files: dict[str, bytes]
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        if revision in self.commits:
            return self.commits[revision]
        if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
            matches = [c for oid, c in self.commits.items() if oid.startswith(revision)]
            if len(matches) == 1:
                return matches[0]
        return None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.commit = status, message, code, commit


class HubState:
    """Repos in memory; one lock serialises every request's view of them."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self._counter = 0

    def new_commit(self, repo: Repo, parent: str | None, title: str, files: dict[str, bytes]) -> Commit:
        self._counter += 1
        digest = hashlib.sha1(f"{repo.repo_id}\0{parent}\0{title}\0{self._counter}\0{time.time_ns()}".encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        commit = Commit(oid=digest.hexdigest(), parent=parent, title=title, files=files)
        repo.commits[commit.oid] = commit
        return commit

    def repo(self, repo_id: str) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return repo

    def commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit


MODEL_ACTIONS = {"revision", "tree", "preupload", "commit", "branch", "refs", "paths-info", "commits"}


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "HubServer._Server"

    # -- plumbing ----------------------------------------------------------------------------------------------
    def log_message(self, format, *args):  # quiet by default; HubServer.requests keeps the trace
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Type", "application/json")
        headers["Content-Length"] = str(len(body))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _json(self, status: int, payload, headers: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        self.server.requests.append(f"{method} {self.path}")
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        body = self._body() if method == "POST" else b""
        try:
            with hub.state.lock:
                self._route(method, parts, query, body)
        except HubError as err:
            headers = {"X-Error-Message": err.message}
            if err.code:
                headers["X-Error-Code"] = err.code
            if err.commit:
                headers["X-Repo-Commit"] = err.commit
            self._send(err.status, json.dumps({"error": err.message}).encode(), headers, head=method == "HEAD")
        except Exception as err:  # log it: the client would only see a dropped connection and retry
            trace = traceback.format_exc()
            hub.errors.append(f"{method} {self.path}: {trace}")
            print(f"[hub_server] {method} {self.path} failed:\n{trace}", file=sys.stderr, flush=True)
            self._send(500, json.dumps({"error": f"test hub server error: {err!r}"}).encode(), head=method == "HEAD")

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    # -- routes ------------------------------------------------------------------------------------------------
    def _route(self, method: str, parts: list[str], query: dict, body: bytes) -> None:
        if parts[:3] == ["api", "repos", "create"] and method == "POST":
            return self._create_repo(json.loads(body or b"{}"))
        if parts[:2] == ["api", "validate-yaml"] and method == "POST":
            return self._validate_yaml(json.loads(body or b"{}"))
        if parts[:2] == ["api", "whoami-v2"] and method == "GET":
            return self._json(200, {"type": "user", "name": "tester", "orgs": [], "auth": {"type": "access_token"}})
        if parts[:2] == ["api", "models"] and len(parts) >= 3:
            return self._model_api(method, parts[2:], query, body)
        # /{repo_id}/resolve/{revision}/{path}, repo ids with or without a namespace; dataset repos (seeded with
        # `HubServer.publish`) are served under /datasets/{org}/{name}/resolve/... and stored as "datasets/org/name"
        for i in (1, 2, 3):
            if len(parts) > i + 2 and parts[i] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(method, "/".join(parts[:i]), unquote(parts[i + 1]), parts[i + 2 :])
        raise HubError(404, f"test hub server: no route for {method} /{'/'.join(parts)}")

    def _model_api(self, method: str, rest: list[str], query: dict, body: bytes) -> None:
        split = 1 if len(rest) == 1 or rest[1] in MODEL_ACTIONS else 2
        repo_id, rest = "/".join(rest[:split]), rest[split:]
        state = self.server.hub.state
        repo = state.repo(repo_id)
        action = rest[0] if rest else None
        revision = unquote(rest[1]) if len(rest) > 1 else "main"
        if action is None and method == "GET":
            return self._model_info(repo, state.commit(repo, "main"))
        if action == "revision" and method == "GET":
            return self._model_info(repo, state.commit(repo, revision))
        if action == "tree" and method == "GET":
            path = "/".join(unquote(p) for p in rest[2:])
            return self._tree(repo, state.commit(repo, revision), path, query)
        if action == "preupload" and method == "POST":
            return self._preupload(state.commit(repo, revision), json.loads(body or b"{}"), query)
        if action == "commit" and method == "POST":
            return self._commit(repo, revision, body, query)
        if action == "branch" and method == "POST":
            return self._create_branch(repo, revision, json.loads(body or b"{}"))
        if action == "refs" and method == "GET":
            branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": oid} for n, oid in repo.branches.items()]
            return self._json(200, {"branches": branches, "tags": [], "converts": []})
        raise HubError(404, f"test hub server: no route for {method} /api/models/{repo_id}/{'/'.join(rest)}")

    # -- handlers ----------------------------------------------------------------------------------------------
    def _create_repo(self, payload: dict) -> None:
        name, org = payload.get("name"), payload.get("organization")
        if not name:
            raise HubError(400, "repo name is required")
        if payload.get("type") not in (None, "model"):
            raise HubError(400, f"test hub server: only model repos, got type {payload.get('type')!r}")
        repo_id = f"{org}/{name}" if org else name
        hub = self.server.hub
        url = f"{hub.url}/{repo_id}"
        if repo_id in hub.state.repos:
            return self._json(409, {"error": "You already created this model repo", "url": url})
        repo = Repo(repo_id=repo_id, private=payload.get("visibility") == "private" or bool(payload.get("private")))
        first = hub.state.new_commit(repo, None, "initial commit", {".gitattributes": b"*.safetensors filter=lfs\n"})
        repo.branches["main"] = first.oid
        hub.state.repos[repo_id] = repo
        self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self, payload: dict) -> None:
        content = payload.get("content", "")
        errors = []
        if content.startswith("---"):
            lines = content.split("\n")
            if not any(line.strip() == "---" for line in lines[1:]):
                errors.append({"message": "metadata block opened with '---' is never closed"})
            elif "\t" in content.split("\n---", 2)[1]:
                errors.append({"message": "YAML metadata must not contain tabs"})
        if errors:
            return self._json(400, {"errors": errors, "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def _model_info(self, repo: Repo, commit: Commit) -> None:
        self._json(
            200,
            {
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": commit.oid,
                "private": repo.private,
                "lastModified": commit.date,
                "siblings": [{"rfilename": path} for path in sorted(commit.files)],
                "tags": [],
            },
        )

    def _tree(self, repo: Repo, commit: Commit, path: str, query: dict) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{path.rstrip('/')}/" if path else ""
        entries, folders = [], set()
        for name in sorted(commit.files):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if "/" in rest:
                folder = prefix + rest.split("/")[0]
                if folder not in folders:
                    folders.add(folder)
                    entries.append({"type": "directory", "path": folder, "oid": git_blob_sha1(folder.encode())})
                if not recursive:
                    continue
            data = commit.files[name]
            entries.append({"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)})
        if path and not entries:
            raise HubError(404, f"{path} does not exist at {commit.oid}", "EntryNotFound", commit.oid)
        self._json(200, entries)

    def _preupload(self, commit: Commit, payload: dict, query: dict) -> None:
        if query.get("create_pr"):
            raise HubError(400, "test hub server: pull requests are not supported")
        files = []
        for item in payload.get("files", []):
            existing = commit.files.get(item["path"])
            files.append(
                {
                    "path": item["path"],
                    "uploadMode": "regular",  # never "lfs": no Xet/LFS transfer in tests
                    "shouldIgnore": False,
                    "oid": git_blob_sha1(existing) if existing is not None else None,
                }
            )
        self._json(200, {"files": files, "commitOid": commit.oid})

    def _commit(self, repo: Repo, revision: str, body: bytes, query: dict) -> None:
        if query.get("create_pr"):
            raise HubError(400, "test hub server: pull requests are not supported")
        state = self.server.hub.state
        if revision not in repo.branches:
            state.commit(repo, revision)  # 404 RevisionNotFound for unknown revisions
            raise HubError(400, f"Cannot commit to {revision!r}: not a branch")
        parent = state.commit(repo, revision)
        files = dict(parent.files)
        header = None
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
                expected = value.get("parentCommit")
                if expected and expected != parent.oid:
                    raise HubError(412, f"parentCommit {expected} is not the head of {revision} ({parent.oid})")
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                if value["path"] not in files:
                    raise HubError(404, "A file with this name doesn't exist", "EntryNotFound", parent.oid)
                del files[value["path"]]
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                files = {p: d for p, d in files.items() if not p.startswith(folder)}
            else:  # lfsFile: preupload never asks for LFS
                raise HubError(400, f"test hub server: unsupported commit operation {key!r}")
        if header is None:
            raise HubError(400, "commit payload has no header line")
        commit = state.new_commit(repo, parent.oid, header.get("summary", ""), files)
        repo.branches[revision] = commit.oid
        hub = self.server.hub
        self._json(
            200,
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{hub.url}/{repo.repo_id}/commit/{commit.oid}",
                "hookOutput": "",
            },
        )

    def _create_branch(self, repo: Repo, branch: str, payload: dict) -> None:
        if branch in repo.branches:
            raise HubError(409, f"Reference refs/heads/{branch} already exists")
        if branch.startswith("refs/"):
            raise HubError(400, f"Invalid reference for a branch: {branch}")
        start = self.server.hub.state.commit(repo, payload.get("startingPoint") or "main")
        repo.branches[branch] = start.oid
        self._json(200, {})

    def _resolve(self, method: str, repo_id: str, revision: str, path_parts: list[str]) -> None:
        state = self.server.hub.state
        repo = state.repo(repo_id)
        commit = state.commit(repo, revision)
        path = "/".join(unquote(p) for p in path_parts)
        data = commit.files.get(path)
        if data is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", commit.oid)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit.oid,
            "ETag": f'"{git_blob_sha1(data)}"',
            "Accept-Ranges": "bytes",
        }
        status, payload = 200, data
        byte_range = self.headers.get("Range")
        if byte_range and byte_range.startswith("bytes=") and method == "GET":
            start_text, _, end_text = byte_range[len("bytes=") :].partition("-")
            start = int(start_text or 0)
            end = int(end_text) if end_text else len(data) - 1
            payload = data[start : end + 1]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + len(payload) - 1}/{len(data)}"
        if method == "HEAD":
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(payload))}.items():
                self.send_header(key, value)
            self.end_headers()
            return
        self._send(status, payload, headers)


class HubServer:
    """A thread serving `HubRequestHandler` on 127.0.0.1 (port 0 by default). Use as a context manager."""

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        hub: "HubServer"
        requests: list[str]

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.state = HubState()
        self.errors: list[str] = []
        self._server = self._Server((host, port), HubRequestHandler)
        self._server.hub = self
        self._server.requests = []
        self.host, self.port = self._server.server_address[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-server", daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def start(self) -> "HubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- seeding and inspection helpers for tests ---------------------------------------------------------------
    def publish(self, repo_id: str, files: dict[str, bytes], repo_type: str = "model") -> str:
        """Creates (or updates) a repo holding `files` without going through the client; returns the commit oid.
        Dataset repos are readable with `hf_hub_download(..., repo_type="dataset")` (resolve only)."""
        key = f"datasets/{repo_id}" if repo_type == "dataset" else repo_id
        with self.state.lock:
            repo = self.state.repos.setdefault(key, Repo(repo_id=key, private=False))
            parent = repo.branches.get("main")
            previous = dict(repo.commits[parent].files) if parent else {}
            commit = self.state.new_commit(repo, parent, "seeded by the test", {**previous, **files})
            repo.branches["main"] = commit.oid
            return commit.oid

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        with self.state.lock:
            repo = self.state.repo(repo_id)
            return dict(self.state.commit(repo, revision).files)

    def head(self, repo_id: str, revision: str = "main") -> str:
        with self.state.lock:
            return self.state.repos[repo_id].branches[revision]

    def history(self, repo_id: str, revision: str = "main") -> list[str]:
        """Commit titles from the newest back to the repo's creation."""
        with self.state.lock:
            repo = self.state.repos[repo_id]
            oid, titles = repo.branches[revision], []
            while oid is not None:
                titles.append(repo.commits[oid].title)
                oid = repo.commits[oid].parent
            return titles


if __name__ == "__main__":  # a manual run: python tests/hub_server.py [port]
    with HubServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0) as server:
        print(f"test hub at {server.url} (HF_ENDPOINT={server.url}); Ctrl-C to stop", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
