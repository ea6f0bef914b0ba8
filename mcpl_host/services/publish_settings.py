"""How ``channels/publish`` goes out on a server, kept across its transports (MCPL §14.3;
the calls are ``services.channel_calls``'s): ``PublishMode``, ``PUBLISH_MODES`` and
``PublishSettings``, the ``HostedServer`` side that ``ChannelCalls`` reads. Apart from the
calls so that a connection that never publishes does not load them."""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["PUBLISH_MODES", "PublishMode", "PublishSettings"]

PublishMode = Literal["request", "notification", "auto"]
PUBLISH_MODES: tuple[PublishMode, ...] = ("request", "notification", "auto")


class PublishSettings(Protocol):
    """Where a server's publish behaviour is kept across transports (a ``HostedServer``):
    read here, changed only through its methods."""

    @property
    def publish_mode(self) -> PublishMode: ...

    @property
    def publish_as_notification(self) -> bool: ...

    def set_publish_mode(self, mode: PublishMode) -> None:
        """The application's choice; forgets what ``"auto"`` learned. Raises ``ValueError``
        for a mode not in ``PUBLISH_MODES``."""
        ...

    def learn_publish_as_notification(self) -> None:
        """The server answered a ``channels/publish`` request with ``-32601``."""
        ...
