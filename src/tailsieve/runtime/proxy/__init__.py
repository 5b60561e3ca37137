"""The HTTP routing proxy (``tailsieve serve``): vLLM's OpenAI API and SGLang's ``/generate``
in front of a ``SessionGateway`` (see ``server``)."""

from tailsieve.runtime.proxy.api_error import ApiError
from tailsieve.runtime.proxy.config import GROUP_HEADERS, SESSION_HEADERS, ProxyConfig
from tailsieve.runtime.proxy.server import RoutingProxy
from tailsieve.runtime.proxy.service import ProxyService, ServedModel
from tailsieve.runtime.proxy.tokenizer import HttpTokenizer, Tokenizer

__all__ = [
    "GROUP_HEADERS",
    "SESSION_HEADERS",
    "ApiError",
    "HttpTokenizer",
    "ProxyConfig",
    "ProxyService",
    "RoutingProxy",
    "ServedModel",
    "Tokenizer",
]
