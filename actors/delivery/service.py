"""DeliveryService: the delivery package as one runtime service.

The top of the package's layers: it adds the admin API's routes (actors/delivery/api/)
to the control plane (actors/delivery/control/service.py) and offers the library calls
that build on both, so that nothing below the API imports the API. See
docs/ARCHITECTURE.md for the sub-packages and the path of a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from actors.delivery.api.control import ControlRoutes
from actors.delivery.api.subscriptions import SubscriptionRoutes
from actors.delivery.api.summary import SummaryRoutes
from actors.delivery.control import inprocess
from actors.delivery.control.inprocess import InProcessSubscription
from actors.delivery.control.service import DeliveryControl
from actors.delivery.egress.handler import Handler

if TYPE_CHECKING:
    from runtime.host.app import Runtime
    from runtime.host.service import ConsumeOptions


class DeliveryService(DeliveryControl):
    async def start(self, runtime: Runtime) -> None:
        SubscriptionRoutes(self).add_to(runtime.admin.app)
        ControlRoutes(self).add_to(runtime.admin.app)
        SummaryRoutes(self).add_to(runtime.admin.app)
        await super().start(runtime)

    async def consume(self, group_id: str, handler: Handler,
                      **options: Unpack[ConsumeOptions]) -> InProcessSubscription:
        """An async Python function as the endpoint (actors/delivery/control/inprocess.py)."""
        return await inprocess.consume(self, self.runtime, group_id, handler, **options)
