"""Hardware in the loop: the simulator's acceptance source served by real drafting and verification
(``source.LiveSource``; ``session.py`` the batched forwards, ``timing.py`` the live clock and measured tables,
``world.py`` which built world is used)."""

from simulator.errors import UserError

try:
    import torch  # noqa: F401
except ImportError:
    raise UserError("acceptance.source: live needs torch: install the runtime extra "
                    "(pip install 'dspark-sim[runtime]'; ./run does it for you)") from None
