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
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=5) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
