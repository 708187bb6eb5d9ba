"""AWS calls for preflight: clients with botocore's standard retries, plus a bounded wrapper.

Every call is bounded (issue 13 item 2): botocore's connect and read timeouts and its retry
count bound one call; an endpoint that stalled or could not be reached once is not asked again
in the same run (its other calls are `unknown` at once, naming the first failure); and a check
runs under a total budget (`Aws.budget`) after which its remaining calls are not made. An
endpoint that accepts connections and never answers therefore costs one call's bound, not one
per call (814 s were seen before).

`Aws.call` never raises for AWS-side trouble. It returns the response, or an `Unavailable`
saying why there is none: the caller may not call the API (`forbidden`), the endpoint does
not serve it (`not-served`, what moto does for capacity reservations), or it stayed throttled
(`throttled`). A check turns that into an `unknown` result with the reason, never a crash.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

# Error codes that mean "slow down"; botocore retries them, this wrapper adds bounded rounds.
THROTTLE_CODES = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException", "SlowDown"}
)
FORBIDDEN_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure", "InvalidClientTokenId",
     "SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken", "OptInRequired"}
)
# Extra rounds after botocore has spent its own attempts, and the backoff between them.
THROTTLE_ROUNDS = 3
THROTTLE_BACKOFF_S = (1.0, 2.0, 4.0)
NO_CREDENTIALS = "no AWS credentials found (set AWS_PROFILE or run `aws configure`)"
# One call: TCP connect, then each read. AWS control-plane APIs answer in well under a second.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
# One call's attempts unless AWS_MAX_ATTEMPTS says otherwise: 2 x (5 + 10) s at worst.
DEFAULT_MAX_ATTEMPTS = 2
# A check's total, whatever its number of calls.
CHECK_BUDGET_S = 30.0
# Failures that say the endpoint itself is not answering, as opposed to an API answer.
_DEAD_ENDPOINT = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)


@dataclass(frozen=True)
class Unavailable:
    """No answer from an API, and why. `kind`: forbidden | not-served | throttled | error."""

    api: str
    kind: str
    reason: str
    code: str | None = None

    def describe(self) -> str:
        return f"{self.api}: {self.reason}"


class Aws:
    """Clients for one region. The endpoint comes from boto3's own resolution (AWS_ENDPOINT_URL)."""

    def __init__(
        self,
        region: str,
        session: boto3.session.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        backoff_s: tuple[float, ...] = THROTTLE_BACKOFF_S,
    ) -> None:
        self.region = region
        self._session = session or boto3.session.Session()
        self._clients: dict[str, Any] = {}
        self._sleep = sleep
        self._backoff = backoff_s
        self._clock = time.monotonic
        self._deadline: float | None = None
        self._dead: dict[str, str] = {}  # endpoint URL -> why it is not asked again
        # mode=standard: throttles and 5xx are retried with jittered backoff. AWS_MAX_ATTEMPTS
        # still wins (botocore reads it when the config does not set it), so users can tune it.
        retries: dict[str, Any] = {"mode": "standard"}
        if not os.environ.get("AWS_MAX_ATTEMPTS"):
            retries["total_max_attempts"] = DEFAULT_MAX_ATTEMPTS
        self._config = Config(
            region_name=region,
            retries=retries,  # type: ignore[arg-type]
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            # moto cannot do the S3 Express CreateSession handshake; preflight only lists buckets.
            # (The key is newer than the botocore stubs, hence the ignore.)
            s3={"disable_s3_express_session_auth": True},  # type: ignore[arg-type]
        )

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service, config=self._config)  # type: ignore[call-overload]
        return self._clients[service]

    @contextmanager
    def budget(self, seconds: float = CHECK_BUDGET_S) -> Iterator[None]:
        """Calls made inside this block stop being made once `seconds` have passed."""
        self._deadline = self._clock() + seconds
        try:
            yield
        finally:
            self._deadline = None

    def call(self, service: str, operation: str, **kwargs: Any) -> Any:
        """The response dict, or `Unavailable`. Throttling gets bounded extra rounds with backoff."""
        api = f"{service}:{_pascal(operation)}"
        client = self.client(service)
        endpoint = str(getattr(client.meta, "endpoint_url", service))
        method = getattr(client, operation)
        last: Unavailable | None = None
        for attempt in range(THROTTLE_ROUNDS + 1):
            if endpoint in self._dead:
                return Unavailable(api, "error", f"not asked: {self._dead[endpoint]}")
            if self._deadline is not None and self._clock() >= self._deadline:
                return Unavailable(api, "error", "not asked: this check's time budget was spent")
            if attempt:
                self._sleep(self._backoff[min(attempt - 1, len(self._backoff) - 1)])
            try:
                return method(**kwargs)
            except ClientError as exc:
                last = classify_client_error(api, exc)
            except ResponseParserError:
                # An EC2-protocol endpoint answering with a non-XML 500 page: moto's "not implemented".
                return Unavailable(api, "not-served", "the endpoint answered with an unparseable error page")
            except NoCredentialsError:
                return Unavailable(api, "forbidden", NO_CREDENTIALS)
            except _DEAD_ENDPOINT as exc:
                why = f"{endpoint} did not answer {api} ({exc})"
                self._dead[endpoint] = why
                return Unavailable(api, "error", f"cannot reach the endpoint: {why}")
            except BotoCoreError as exc:
                return Unavailable(api, "error", f"{type(exc).__name__}: {exc}")
            if last.kind != "throttled":
                return last
        assert last is not None  # the loop ran at least once and only falls through when throttled
        return Unavailable(api, "throttled", f"still throttled after {THROTTLE_ROUNDS} extra rounds", last.code)


def classify_client_error(api: str, exc: ClientError) -> Unavailable:
    err = exc.response.get("Error", {})
    code = str(err.get("Code") or "")
    message = str(err.get("Message") or "").strip()
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in THROTTLE_CODES:
        return Unavailable(api, "throttled", f"throttled ({code})", code)
    if code in FORBIDDEN_CODES or status == 403:
        return Unavailable(api, "forbidden", f"not allowed ({code}: {message})", code)
    if code in {"500", "501", "InternalFailure", "NotImplemented", "InvalidAction"} or status >= 500:
        return Unavailable(api, "not-served", f"the endpoint does not serve it ({code or status})", code)
    return Unavailable(api, "error", f"{code}: {message}", code)


def _pascal(operation: str) -> str:
    return "".join(part.capitalize() for part in operation.split("_"))


def failed(result: Any) -> bool:
    return isinstance(result, Unavailable)
