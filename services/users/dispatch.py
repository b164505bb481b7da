"""Users' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.users import EraseUser

from services.runtime.dispatch import Internal, Routes, Serve
from services.users import commands
from services.users.erasure import Erasure

ROUTES: Routes = {
    EraseUser: Serve(Erasure.erase, on=Erasure),  # the admin role checked, then the bus, then the key destroyed
}

# The erasure's event, recorded by the bus once Erasure.erase has checked the caller.
INTERNAL: Internal = {EraseUser: commands.erase_user}
