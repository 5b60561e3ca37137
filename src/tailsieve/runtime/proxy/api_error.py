"""The proxy's HTTP errors: a status, vLLM's error type and a message that names what is wrong.

Every error the proxy answers has vLLM's ``ErrorResponse`` JSON (``{"error": {"message",
"type", "param", "code"}}``), on the OpenAI routes and on SGLang's ``/generate`` alike (SGLang
answers ``{"error": {"message"}}``, which this shape contains). Each error also has a
``reason``, a short label the proxy's metrics count refusals by
(``tailsieve_proxy_refusals_total{route, reason}``).
"""

from __future__ import annotations

from typing import Any

from tailsieve.errors import TailSieveError


class ApiError(TailSieveError):
    """A request the proxy answers with an HTTP error."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError",
                 param: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param
        self.reason = reason or _snake(err_type.removesuffix("Error") or "error")

    @property
    def message(self) -> str:
        return str(self)

    def body(self) -> dict[str, Any]:
        """vLLM's ``ErrorResponse`` JSON."""
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param,
                          "code": self.status}}


def bad_request(message: str, param: str | None = None, reason: str | None = None,
                ) -> ApiError:
    """HTTP 400: the request is malformed or asks for something out of range."""
    return ApiError(message, 400, "BadRequestError", param, reason)


def not_found_model(model: str, served: str) -> ApiError:
    """HTTP 404 for a model the servers do not serve (vLLM's message)."""
    return ApiError(f"The model `{model}` does not exist. Valid aliases: {served}.", 404,
                    "NotFoundError", "model")


def unavailable(message: str) -> ApiError:
    """HTTP 503: no server can take the request now (all down, or none registered yet)."""
    return ApiError(message, 503, "ServiceUnavailableError")


def bad_gateway(message: str) -> ApiError:
    """HTTP 502: a server answered with an error the proxy could not retry away."""
    return ApiError(message, 502, "BadGatewayError")


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(name))
