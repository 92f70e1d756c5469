"""Hardware in the loop: the simulator's acceptance source served by real drafting and verification
(``source.LiveSource``; ``session.py`` the batched forwards, ``timing.py`` the live clock and measured tables,
``world.py`` which built world is used)."""

import importlib.util

from simulator.errors import UserError

if importlib.util.find_spec("torch") is None:
    raise UserError("acceptance.source: live needs torch: install the runtime extra "
                    "(pip install 'dspark-sim[runtime]'; ./run does it for you)")
