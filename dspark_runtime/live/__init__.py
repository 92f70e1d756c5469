"""Hardware in the loop: the simulator's acceptance source served by real drafting and verification
(``source.LiveSource``; ``session.py`` the batched forwards, ``timing.py`` the live clock and measured tables,
``world.py`` which built world is used)."""

import importlib

from simulator.errors import UserError

#: the modules a live run imports (models, tokenizer, checkpoints), each from the ``runtime`` extra of
#: pyproject.toml. Checked here, when the simulator loads the entry point, so that a missing one is one line
#: before any model is touched instead of a traceback from deep inside a load.
NEEDS = ("torch", "transformers", "tokenizers", "safetensors")
INSTALL = "install the runtime extra (pip install 'dspark-sim[runtime]'; ./run does it for you)"

for _name in NEEDS:
    try:
        importlib.import_module(_name)
    except ImportError:
        raise UserError(f"acceptance.source: live needs {_name}, which is not installed: {INSTALL}") from None
