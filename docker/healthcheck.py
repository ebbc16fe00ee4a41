"""Container health check of a coordinator: GET the admin endpoint's /admin/v2/health.

Healthy (exit 0) when it answers 200 with a JSON body; unhealthy (exit 1) otherwise. Standard library
only: the slim image has no curl. Sends ``Authorization: Bearer $PULSAR_TXN_AUTH_TOKEN`` when token
auth is on (the admin endpoint then requires it). The URL can be changed with
``PULSAR_TXN_HEALTH_URL`` (e.g. when ``admin_port`` is not 8080).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8080/admin/v2/health"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the bearer token to whatever host it names: treat it as unhealthy."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def main() -> int:
    url = os.environ.get("PULSAR_TXN_HEALTH_URL") or DEFAULT_URL
    request = urllib.request.Request(url)
    token = os.environ.get("PULSAR_TXN_AUTH_TOKEN")
    if token:
        if any(ord(c) < 32 or ord(c) == 127 for c in token) or token != token.strip(" \t"):
            # Checked here, not left to http.client: its error would quote the token, and Docker
            # keeps a health check's output (docker inspect).
            print("unhealthy: PULSAR_TXN_AUTH_TOKEN holds a control character or edge space", file=sys.stderr)
            return 1
        # UTF-8 bytes, as the server compares them (a str header would go out as latin-1).
        request.add_header("Authorization", f"Bearer {token}".encode())  # type: ignore[arg-type]
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=5) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as exc:
        # Only the kind of failure (and an HTTP status): an exception's text can quote the headers.
        what = f"HTTP {exc.code}" if isinstance(exc, urllib.error.HTTPError) else type(exc).__name__
        print(f"unhealthy: {url}: {what}", file=sys.stderr)
        return 1
    print(json.dumps(body, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
