"""Users' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.users import EraseUser

from services.runtime.dispatch import Decide, Serve
from services.users import commands
from services.users.erasure import Erasure

ROUTES = (
    Serve(EraseUser, Erasure.erase, on=Erasure),  # the admin role checked, then the bus, then the key destroyed
)

# The erasure's event, recorded by the bus once Erasure.erase has checked the caller.
INTERNAL = (Decide(EraseUser, commands.erase_user),)
