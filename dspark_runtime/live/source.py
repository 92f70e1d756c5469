"""``LiveSource``: the simulator's acceptance-source interface, with its extension for sources that generate real
tokens (``simulator.core.acceptance.runtime.RuntimeSource``), served by real drafting and verification.

A scenario selects it with ``acceptance: {source: live, runtime: tiny | smoke | DIR, device: cpu | cuda,
temperature: 1.0}`` (the simulator finds ``live`` through the ``dspark_sim.acceptance`` entry point and never
imports this package). Each simulated request is given a real held-out prompt of its mix entry (a domain such as
``math`` or a benchmark such as ``arith``) when it arrives; when it first decodes its prompt is prefilled into a
slot of the real caches; each engine step of a replica is one ``propose`` (prefill of newcomers, one drafting
forward for all its decoding requests, the drafter's STS-calibrated confidences -- raw under
``confidence: raw``) and one ``verify`` (one target forward over exactly the chosen prefixes, batched lossless
rejection sampling, the accepted tokens and the correction or bonus token appended to the real sequences).

What the engine learns back:
- ``verify`` returns accepted draft tokens per request; ``proposal.ended`` marks requests whose emitted tokens
  include EOS (the engine ends them there). An accepted EOS inside the drafts ends the request after it, with no
  bonus: the engine is told ``emitted - 1`` so that its count of tokens equals the real sequence's.
- ``step_ms()``: the measured milliseconds of the step's forwards (the engine's clock under ``clock: live``).
- ``preempt(ids)``: the engine evicted these requests; their caches are dropped and recomputed on readmission.
- With ``start_recording()`` every step also verifies the whole block (untimed, see session.py) and
  ``write_trace`` writes the rows in the trace format ``source: trace`` replays.

The policy ``oracle`` needs every outcome before it chooses; a live source cannot know it in advance and says so.
"""

from __future__ import annotations

import os
import platform
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from simulator.core.acceptance.base import GrowingArrays, Proposal
from simulator.core.acceptance.runtime import RuntimeSource
from simulator.core.calibration import sts_apply
from simulator.errors import UserError

from ..target import TargetRunner, resolve_device, resolve_dtype
from .checkpoints import checkpoint_digest, load_checkpoints
from .session import LiveBatch
from .standins import HOST_EVENTS, HostNvml
from .timing import MeasuredTable, StepTimer
from .world import load_world, resolve_world, world_digest


def _max_output(scn, where: str) -> int:
    out = scn.model.workload.output
    if out.dist == "fixed":
        return int(out.value)
    if out.dist == "uniform":
        return int(out.high)
    if getattr(out, "max", None):
        return int(out.max)
    raise UserError(f"{scn.path}: workload.output.max: a live run needs bounded output lengths (its caches are "
                    f"allocated once); give the {out.dist} length a 'max'")


class LiveSource(RuntimeSource):
    #: the drafter-less system (``ar``) also decodes for real: one target forward per step
    decodes_without_drafter = True
    measures_time = True

    @classmethod
    def input_digest(cls, options: dict) -> str:
        if options.get("target"):
            return checkpoint_digest(str(options["target"]), options.get("drafter_checkpoint"),
                                     str(options.get("prompts", "")))
        return world_digest(str(options.get("runtime", "tiny")))

    def __init__(self, *, scenario, drafter: str, gamma: int, mix: list[str], calibrated: bool,
                 rng: np.random.Generator, slots: int, disaggregated: bool, runtime: str = "tiny", device: str = "cpu", temperature: float = 1.0,
                 dtype: str = "float32", prompts_per_entry: int | None = None, threads: int | None = None,
                 keep_outputs: bool = False, ignore_eos: bool = False, gpu_stand_in: bool = False,
                 target: str | None = None, drafter_checkpoint: str | None = None, prompts: str | None = None,
                 eos_token_id: int | None = None):
        where = f"{scenario.path}: acceptance"
        if not isinstance(temperature, int | float) or temperature < 0:
            raise UserError(f"{where}.temperature: expected a number >= 0, got {temperature!r}")
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"{where}.device: {device!r} requested but torch sees no CUDA device "
                            "(use device: cpu, or a machine with a GPU and a CUDA build of torch)")
        try:
            dev = resolve_device(str(device))
            resolve_dtype(dtype)
        except UserError as exc:
            raise UserError(f"{where}: {exc}".replace("--device", "device").replace("--dtype", "dtype")) from None
        # one thread by default on the CPU: a sweep runs one process per core, and tiny forwards lose more to
        # threads waiting on each other than they gain (measured: 40x slower linears with 2 threads on 2 busy cores)
        if threads is not None or str(device) == "cpu":
            torch.set_num_threads(int(threads or 1))
        kind = drafter if drafter != "none" else "dspark"
        if drafter not in ("none", "dspark", "dflash", "eagle3"):
            raise UserError(f"{where}: the live runtime has no {drafter!r} drafter (it has dspark, dflash, eagle3)")
        if target is None:
            if drafter_checkpoint is not None or prompts is not None:
                field = "drafter_checkpoint" if drafter_checkpoint is not None else "prompts"
                raise UserError(f"{where}.{field}: given without acceptance.target (real checkpoints need the target "
                                "directory, its drafter and the prompts file; without them the tiny world is used)")
            root = resolve_world(runtime, kind, where).root
            world = load_world(str(root), drafter, str(dev), dtype)
        else:
            if prompts is None:
                raise UserError(f"{where}.prompts: a live run on checkpoints (acceptance.target) needs a JSONL file "
                                "of prompts ({\"prompt\": ..., \"domain\": ...} a line)")
            if drafter != "none" and drafter_checkpoint is None:
                raise UserError(f"{where}.drafter_checkpoint: system drafter {drafter!r} needs a DeepSpec-format "
                                "drafter directory beside acceptance.target")
            root = scenario.resolve(str(target))
            world = load_checkpoints(str(root), str(scenario.resolve(str(drafter_checkpoint)))
                                     if drafter_checkpoint is not None else None,
                                     str(scenario.resolve(str(prompts))), str(dev), dtype, where)
            if drafter == "none":
                world = replace(world, drafter=None, temperatures=None)
            elif not str(world.drafter.config.kind).startswith(drafter):
                raise UserError(f"{where}.drafter_checkpoint: the checkpoint is a {world.drafter.config.kind!r} "
                                f"drafter; the system drafts with {drafter!r}")
        self.world = world
        self.drafter_name = drafter
        self.gamma = 0 if drafter == "none" else int(gamma)
        if world.drafter is not None and self.gamma != world.drafter.gamma:
            raise UserError(f"{scenario.path}: systems: the live {drafter} drafter of {root} drafts "
                            f"{world.drafter.gamma} tokens; set gamma {world.drafter.gamma} (got {gamma})")
        self.calibrated = calibrated and world.temperatures is not None
        self.temperature = float(temperature)
        self.mix = list(mix)
        pools = []
        for key in self.mix:
            if key not in world.prompts:
                have = ", ".join(sorted(world.prompts))
                raise UserError(f"{scenario.path}: workload.mix: {key!r} is neither a domain nor a benchmark of the "
                                f"live run's prompts (it has: {have})")
            pool = world.prompts[key][: prompts_per_entry] if prompts_per_entry else world.prompts[key]
            pools.append(pool)
        self.pools = pools
        self.rng = rng
        if not isinstance(gpu_stand_in, bool) or (gpu_stand_in and dev.type != "cpu"):
            raise UserError(f"{where}.gpu_stand_in: true or false, and true only with device: cpu (it times the CPU "
                            f"with the GPU path's event pairs and samples the host through the NVML sampler, for a "
                            f"dry run of the GPU script); got {gpu_stand_in!r} on {dev}")
        # a disaggregated pool's prefill samples the first token in one more slot, given back at once (every other
        # slot may be held by running requests then)
        scratch = 1 if disaggregated else 0
        longest = max(len(t) for pool in pools for _, t in pool)
        capacity = longest + _max_output(scenario, where) + self.gamma + 2
        self.timer = StepTimer(dev, HOST_EVENTS if gpu_stand_in else None)
        gen = torch.Generator(device=dev).manual_seed(int(rng.integers(2**63 - 1)))
        runner = TargetRunner(world.target, world.layer_ids)
        if eos_token_id is not None and (not isinstance(eos_token_id, int) or isinstance(eos_token_id, bool)
                                         or not 0 <= eos_token_id < int(world.target.config.vocab_size)):
            raise UserError(f"{where}.eos_token_id: expected a token id in 0..{world.target.config.vocab_size - 1}, "
                            f"got {eos_token_id!r}")
        # the tokenizer's end token unless told (a chat model may end its turns with another, e.g. <|im_end|>)
        self.eos_id = None if ignore_eos else (eos_token_id if eos_token_id is not None
                                                else world.tokenizer.eos_token_id)
        self.batch = LiveBatch(runner, world.drafter, slots=slots + scratch, capacity=capacity, temperature=self.temperature,
                               eos_id=self.eos_id, generator=gen, timer=self.timer)
        self.state = GrowingArrays(mix=np.int64, prompt=np.int64, slot=np.int64)
        self.free = list(range(slots - 1, -1, -1))
        self.saved: dict[int, list[int]] = {}  # preempted requests: their context, recomputed on readmission
        self.eos_first: set[int] = set()
        self.parked: dict[int, int] = {}  # first token a disaggregated pool emitted, until the request decodes
        self.scratch = slots if scratch else None
        self.outputs: dict[int, list[int]] | None = {} if keep_outputs else None
        self.recording = False
        self.trace: list[dict[str, np.ndarray]] = []
        self.ends: dict[int, tuple[int, bool]] = {}  # recorded requests that finished: (output tokens, ended at EOS)
        self.target_table, self.drafter_table = MeasuredTable(), MeasuredTable()
        self._pending = None
        self._unclaimed_ms = 0.0
        self.sampler = None
        if dev.type == "cuda" or gpu_stand_in:
            from hw_profile.measure.telemetry import NvmlSampler

            self.sampler = NvmlSampler.open("cuda", index=dev.index or 0, nvml=HostNvml() if gpu_stand_in else None)
        self.meta = {"runtime": str(root), "device": str(dev), "dtype": dtype, "drafter": drafter,
                     "temperature": self.temperature, "torch": torch.__version__, "gpu_stand_in": gpu_stand_in, "host": platform.node(),
                     "target_parameters": int(sum(p.numel() for p in world.target.parameters()))}

    # --- the interface ------------------------------------------------------------------------------------
    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        if len(ids) == 0:
            return
        s = self.state
        s.ensure(int(ids.max()))
        sizes = np.array([len(p) for p in self.pools])[mix_index]
        s.mix[ids] = mix_index
        s.prompt[ids] = (self.rng.random(len(ids)) * sizes).astype(np.int64)
        s.slot[ids] = -1

    def propose(self, ids: np.ndarray) -> Proposal:
        if self.sampler is not None and self.sampler.available:
            self.sampler.start()
        slots = self._slots(ids)
        if self.gamma == 0:
            self._pending = (ids, slots, None)
            return Proposal(confidence=np.zeros((len(ids), 0)))
        drafted = self.batch.draft(slots)
        raw = drafted.raw.numpy() if drafted.raw is not None else None
        if raw is None:
            conf = np.zeros((len(ids), self.gamma))
        else:
            conf = sts_apply(raw, self.world.temperatures) if self.calibrated else raw.astype(float)
        self._pending = (ids, slots, drafted, raw, conf)
        return Proposal(confidence=np.asarray(conf, dtype=float))

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        ids, slots, drafted, *seen = self._pending
        self._pending = None
        out = self.batch.verify(slots, drafted, torch.from_numpy(np.asarray(lengths, dtype=np.int64)),
                                full=self.recording and drafted is not None)
        emitted = out.emitted.numpy()
        ended = out.ended.numpy()
        if self.eos_first:  # a token sampled by the prefill that was EOS ends the request now
            first = np.fromiter((int(i) in self.eos_first for i in ids), dtype=bool, count=len(ids))
            ended = ended | first
        proposal.ended = ended
        ms = self.timer.end_step()
        tel = self.sampler.stop() if self.sampler is not None and self.sampler.available else None
        self._unclaimed_ms += float(sum(ms.values()))
        rows = len(ids)
        self.target_table.add(out.verified, out.kv_read, rows, ms.get("verify", 0.0), tel)
        if drafted is not None:
            ctx = int(self.batch.dctx.lengths[slots].sum())
            self.drafter_table.add(rows * self.gamma, ctx, rows, ms.get("draft", 0.0), tel)
        if self.recording and drafted is not None:
            raw, conf = seen
            mix = self.state.mix[ids]
            self.trace.append({"mix": mix, "prompt": self.state.prompt[ids], "request": ids.copy(),
                               "accepted": out.full.numpy(),
                               "c": conf if raw is not None else None, "raw": raw})
        return emitted - 1

    def detach(self, ids: np.ndarray) -> None:
        s = self.state
        for rid in ids.tolist():  # bookkeeping of finished requests, no forwards
            slot = int(s.slot[rid]) if rid < len(s.slot) else -1
            if self.recording and rid < len(s.slot):
                self.ends[rid] = self._generated(rid)
            if slot >= 0:
                if self.outputs is not None:
                    prompt = self.pools[int(s.mix[rid])][int(s.prompt[rid])][1]
                    self.outputs[rid] = self.batch.tokens(slot, len(prompt))
                self.batch.release(torch.tensor([slot]))
                self.free.append(slot)
                s.slot[rid] = -1
            elif rid in self.parked and self.outputs is not None:  # ended by the pool's first token
                self.outputs[rid] = [self.parked[rid]]
            self.saved.pop(rid, None)
            self.parked.pop(rid, None)
            self.eos_first.discard(rid)

    # --- the runtime extension (simulator.core.acceptance.runtime) ------------------------------------------------
    def preempt(self, ids: np.ndarray) -> None:
        """The engine evicted these requests: free their caches, keep their tokens for the recompute. (A request a
        disaggregated pool prefilled decodes in every step it is admitted to, so it holds its cache here before
        it can be evicted: the engine preempts only after a step.)"""
        s = self.state
        for rid in ids.tolist():
            slot = int(s.slot[rid])
            if slot < 0:
                continue
            self.saved[rid] = self.batch.tokens(slot)
            self.batch.release(torch.tensor([slot]))
            self.free.append(slot)
            s.slot[rid] = -1

    def prefilled(self, ids: np.ndarray) -> np.ndarray:
        """The engine's prefill of these requests completed: prefill them for real now (one batched forward) and
        sample the token the engine just counted; those whose token is EOS end now (returned mask). (A request
        prefilled by a disaggregated pool is prefilled here lazily, when it first decodes.)"""
        ended = np.zeros(len(ids), dtype=bool)
        self._slots(ids, ended)
        return ended

    def prefilled_elsewhere(self, ids: np.ndarray) -> np.ndarray:
        """A disaggregated pool prefilled these requests and emitted their first token: sample it for real now (in
        the scratch slot, given back at once; the pool's forward is not this deployment's, so its time is not
        kept) and keep it until the request first decodes, when its prompt is prefilled on the replica and that
        token is its anchor. Returns which ended at their first token (EOS): they finish with that one token."""
        ended = np.zeros(len(ids), dtype=bool)
        if self.scratch is None:  # not built as disaggregated: prefill when it decodes
            return ended
        slot = torch.tensor([self.scratch], device=self.batch.device)
        for i, rid in enumerate(ids.tolist()):  # one request per completed remote prefill
            self.batch.load(slot, [self.prompt_of(rid)])
            ended[i] = bool(self.batch.prefill(slot)[0])
            self.parked[rid] = int(self.batch.anchor[self.scratch])
            self.batch.release(slot)
        self.timer.end_step()
        return ended

    def step_ms(self) -> float:
        """Measured milliseconds of this step's forwards (prefill, draft, verify) since the last call."""
        ms = self._unclaimed_ms + float(sum(self.timer.end_step().values()))
        self._unclaimed_ms = 0.0
        return ms

    def start_recording(self) -> bool:
        self.recording = self.gamma > 0
        return self.recording

    def prompt_of(self, rid: int) -> list[int]:
        s = self.state
        return list(self.pools[int(s.mix[rid])][int(s.prompt[rid])][1])

    # --- internals --------------------------------------------------------------------------------------------
    def _generated(self, rid: int) -> tuple[int, bool]:
        """The request's real output so far (tokens emitted after its prompt) and whether its last one is EOS."""
        slot = int(self.state.slot[rid])
        if slot >= 0:
            tokens = self.batch.tokens(slot, len(self.prompt_of(rid)))
        elif rid in self.saved:
            tokens = self.saved[rid][len(self.prompt_of(rid)):]
        else:
            tokens = [self.parked[rid]] if rid in self.parked else []
        return len(tokens), bool(tokens) and self.eos_id is not None and tokens[-1] == self.eos_id

    def _slots(self, ids: np.ndarray, ended: np.ndarray | None = None) -> torch.Tensor:
        """The requests' cache slots, taking and prefilling one for each that has none. A prefill's token that is
        EOS is reported in ``ended`` (n,) when given (the engine ends the request in this step), else the request
        ends at its next verify (``eos_first``; a disaggregated pool's request has its first token from
        ``prefilled_elsewhere`` and takes it here as its anchor instead of sampling one)."""
        s = self.state
        slot = s.slot[ids]
        new = np.flatnonzero(slot < 0)
        if len(new):
            if len(new) > len(self.free):
                raise RuntimeError(f"live source: {len(new)} requests need a slot, {len(self.free)} are free")
            taken = [self.free.pop() for _ in range(len(new))]
            s.slot[ids[new]] = taken
            contexts = [self.saved.pop(rid, None) or self.prompt_of(rid) for rid in ids[new].tolist()]
            forced = torch.tensor([self.parked.pop(rid, -1) for rid in ids[new].tolist()])
            t = torch.tensor(taken, device=self.batch.device)
            self.batch.load(t, contexts)
            eos = self.batch.prefill(t, forced if bool((forced >= 0).any()) else None).numpy()
            if ended is not None:
                ended[new] = eos
            else:
                self.eos_first.update(ids[new][eos].tolist())
            slot = s.slot[ids]
        return torch.from_numpy(slot.copy()).to(self.batch.device)

    # --- outputs of a run -------------------------------------------------------------------------------------
    def write_trace(self, path: Path) -> Path | None:
        """The recorded full-block verifications, one row per request-step, in the trace format."""
        import pandas as pd

        from atomic_files import atomic_write

        if not self.trace:
            return None
        g = self.gamma
        mix = np.concatenate([t["mix"] for t in self.trace])
        prompt = np.concatenate([t["prompt"] for t in self.trace])
        df = pd.DataFrame({
            "domain": np.array(self.mix)[mix],
            "benchmark": [self.pools[m][p][0] for m, p in zip(mix.tolist(), prompt.tolist(), strict=True)],
            "drafter": self.drafter_name, "gamma": g,
            "accepted": np.concatenate([t["accepted"] for t in self.trace]),
        })
        # where each request ended (the same on each of its rows): its real output and whether it ended at EOS;
        # a request still running when the run stopped has what it had emitted then (censored, eos 0)
        request = np.concatenate([t["request"] for t in self.trace])
        ends = {rid: self.ends.get(rid) or self._generated(rid) for rid in np.unique(request).tolist()}
        df["request"] = request
        df["output"] = [ends[r][0] for r in request.tolist()]
        df["eos"] = [int(ends[r][1]) for r in request.tolist()]
        df["finished"] = [int(r in self.ends) for r in request.tolist()]
        has = self.trace[0]["raw"] is not None
        c = np.concatenate([t["c"] for t in self.trace]) if has else np.full((len(df), g), np.nan)
        raw = np.concatenate([t["raw"] for t in self.trace]) if has else np.full((len(df), g), np.nan)
        for j in range(g):
            df[f"c_{j + 1}"] = c[:, j]
        for j in range(g):
            df[f"raw_{j + 1}"] = raw[:, j]
        return atomic_write(path, lambda p: df.to_csv(p, index=False, float_format="%.6g"))

    def measured_tables(self) -> dict:
        """The step-time tables this run measured (hw_profile's rows) and their metadata (``kind: live``)."""
        shape = self.world.target.config
        meta = {**self.meta, "kind": "live", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "pid": os.getpid(), "model_shape_tiny": {
                    "layers": int(shape.num_hidden_layers), "hidden": int(shape.hidden_size),
                    "heads": int(shape.num_attention_heads), "kv_heads": int(shape.num_key_value_heads),
                    "vocab": int(shape.vocab_size)},
                "telemetry": (self.sampler.device_info() if self.sampler is not None
                              else {"telemetry": "no NVML telemetry: measuring on the CPU"})}
        meta["steps"] = {"target": len(self.target_table.rows), "drafter": len(self.drafter_table.rows)}
        meta["throttled_steps"] = {"target": self.target_table.throttled_steps(),
                                   "drafter": self.drafter_table.throttled_steps()}
        return {"target": self.target_table.points(),
                "drafter": self.drafter_table.points() if self.gamma else [], "meta": meta}
