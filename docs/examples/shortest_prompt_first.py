"""The example admission rule of docs/extending.md: the shortest waiting prompts join the batch first."""

from collections import deque

import numpy as np

from simulator import Admission


class ShortestPromptFirst(Admission):
    """Shortest prompt first among the ``window`` oldest waiting requests (a bounded window keeps the oldest from
    waiting forever behind a stream of short prompts)."""

    name = "shortest-prompt-first"
    window = 16  # a rule is built with no arguments, once per replica: a subclass changes this

    def take(self, queue: deque[int], room: int, free_kv: int, requests: dict[str, np.ndarray],
             lookahead: int) -> list[int]:
        head = [queue[i] for i in range(min(self.window, len(queue)))]
        head.sort(key=lambda rid: requests["prompt"][rid])
        taken = []
        for rid in head[:room]:
            need = int(requests["prompt"][rid] + requests["generated"][rid]) + lookahead
            if need > free_kv:
                break
            taken.append(rid)
            free_kv -= need
        for rid in taken:
            queue.remove(rid)
        return taken
