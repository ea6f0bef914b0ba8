"""``inference/request`` (MCPL §11) and ``model/info`` (§12), after admission.

Rules:

- ``inference/request`` with ``stream: true`` and an id gets an ``InferenceStream`` that sends
  ``inference/chunk`` notifications on the transport the request came on; with id null it is
  answered whole (docs/protocol.md R7: chunks could not name their request).
- ``model/info`` is answered by ``HostHandlers.model_info`` (default: the configured
  ``model_info`` or ``-32601``).
- A handler result of the wrong shape is the application's bug: ``-32603`` and a log line.
- Each answer is reported as a ``server_request`` observation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpl_host.handlers import HostHandlers, InferenceStream, Notifier, RequestContext
from mcpl_host.jsonrpc.errors import ErrorCode, HandlerError
from mcpl_host.jsonrpc.values import JSONObject
from mcpl_host.logging import Logger
from mcpl_host.mcpl.server_shapes import inference_result_problems, model_info_problems
from mcpl_host.services.push import checked_result

if TYPE_CHECKING:
    from mcpl_host.observe import Reporter

__all__ = ["InferenceService"]


class InferenceService:
    """Serves admitted ``inference/request`` and ``model/info`` for one connection."""

    def __init__(self, handlers: HostHandlers, reporter: Reporter, notify: Notifier, *, log: Logger) -> None:
        self._handlers = handlers
        self._reporter = reporter
        self._notify = notify
        self._log = log

    async def serve(self, context: RequestContext, params: Any) -> JSONObject:
        """The result of an admitted request; raises ``HandlerError``."""
        try:
            if context.method == "inference/request":
                stream = None
                if params.get("stream") is True and context.id is not None:
                    stream = InferenceStream(context.id, self._notify)
                raw = await self._handlers.inference_request(context, params, stream)
                result = checked_result(context.method, raw, inference_result_problems(raw), self._log)
            else:
                raw = await self._handlers.model_info(context)
                result = checked_result(context.method, raw, model_info_problems(raw), self._log)
        except HandlerError as exc:
            self._reporter.handled_request(context, params, error=exc.to_error())
            raise
        except Exception:
            error = {"code": int(ErrorCode.INTERNAL_ERROR), "message": "Internal error"}
            self._reporter.handled_request(context, params, error=error)
            raise
        self._reporter.handled_request(context, params, answer=result)
        return result
