"""`dspark build-tiny`: the whole tiny world, stage by stage, each stage cached in the data directory.

corpus -> tokenizer -> target LM -> self-distillation answers -> drafters (trained jointly) -> STS calibration.
A stage whose output exists is skipped (``force`` rebuilds everything); every stage is seeded, so a rebuild on the
same machine gives the same files. ``build.json`` records sizes, seeds, losses and the time each stage took.
"""

from __future__ import annotations

import json
import platform
import time

import torch

from atomic_files import atomic_write_text
from simulator.errors import UserError

from .checkpoints import load_drafter, save_calibration, save_drafter
from .corpus import DOMAINS, build_corpus, load_corpus, save_corpus, select
from .drafters import DSPARK_ARCH, EAGLE3_ARCH, DrafterConfig, build_drafter
from .progress import Progress
from .world import DRAFTER_KINDS, VARIANT_KINDS, WorldPaths, WorldSize

REGEN_TEMPERATURE = 0.7  # the target regenerates training answers at this temperature (paper: recommended sampling)
EVAL_TEMPERATURE = 1.0  # the paper evaluates (and we calibrate) at temperature 1


def quiet_transformers() -> None:
    """transformers' own progress bars would interleave with ours."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def set_threads(threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            raise UserError(f"--threads: {threads}; expected a positive integer")
        torch.set_num_threads(threads)


def drafter_config(kind: str, size: WorldSize, target_config, mask_token_id: int) -> DrafterConfig:
    common = dict(vocab_size=target_config.vocab_size, hidden_size=target_config.hidden_size,
                  intermediate_size=target_config.intermediate_size,
                  num_attention_heads=target_config.num_attention_heads,
                  num_key_value_heads=target_config.num_key_value_heads, head_dim=target_config.head_dim,
                  num_target_layers=target_config.num_hidden_layers, target_layer_ids=list(size.target_layer_ids),
                  block_size=size.gamma, rms_norm_eps=target_config.rms_norm_eps,
                  max_position_embeddings=target_config.max_position_embeddings)
    if kind == "eagle3":
        cfg = DrafterConfig(architecture=EAGLE3_ARCH, num_hidden_layers=1, **common)
    else:
        head = {"dspark": "vanilla", "dspark-gated": "gated", "dspark-rnn": "rnn", "dflash": None}[kind]
        cfg = DrafterConfig(architecture=DSPARK_ARCH, num_hidden_layers=size.drafter_layers,
                            mask_token_id=mask_token_id, num_anchors=size.num_anchors,
                            markov_rank=size.markov_rank if head else 0, markov_head_type=head,
                            enable_confidence_head=head is not None, confidence_head_with_markov=head is not None,
                            **common)
    cfg.validate(f"drafter config for {kind}")
    return cfg


def build_tiny(paths: WorldPaths, size: WorldSize, *, seed: int = 0, device: str = "cpu", variants: bool = False,
               force: bool = False, progress: Progress | None = None) -> dict:
    from .pretrain import train_target
    from .rollouts import encode_prompts, eval_records, run_blocks
    from .selfdistill import regenerate
    from .target import TargetRunner, load_target, qwen3_config, save_target
    from .tokenizer import format_record, load_tokenizer, train_tokenizer
    from .train import DistillData, train_drafters

    progress = progress or Progress()
    quiet_transformers()
    paths.root.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(paths.manifest.read_text()) if paths.manifest.is_file() and not force else {}
    manifest.update({"size": size.to_json(), "seed": seed, "device": device, "torch": torch.__version__,
                     "threads": torch.get_num_threads(),
                     "python": platform.python_version(), "machine": platform.machine()})
    stages = manifest.setdefault("stages", {})

    def done(stage: str, t0: float, **info) -> None:
        stages[stage] = {"seconds": round(time.monotonic() - t0, 1), **info}
        atomic_write_text(paths.manifest, json.dumps(manifest, indent=2))

    # 1. corpus
    t0 = time.monotonic()
    if force or not paths.corpus.is_file():
        records = build_corpus(size, seed)
        save_corpus(records, paths.corpus)
        counts = {f"{d}/{s}": len(select(records, s, d)) for d in DOMAINS for s in ("train", "calib", "eval")}
        done("corpus", t0, records=counts)
        progress(f"corpus: {len(records)} records {counts}")
    records = load_corpus(paths.corpus)
    train_records = select(records, "train")

    # 2. tokenizer
    t0 = time.monotonic()
    if force or not paths.tokenizer.is_file():
        train_tokenizer((format_record(r.prompt, r.answer) for r in train_records), size.vocab_size, paths.tokenizer)
        done("tokenizer", t0, vocab_size=size.vocab_size)
        progress(f"tokenizer: byte-level BPE, {size.vocab_size} tokens")
    tokenizer = load_tokenizer(paths.tokenizer)
    special = {"pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id}

    # 3. target
    t0 = time.monotonic()
    if force or not (paths.target / "config.json").is_file():
        from transformers import Qwen3ForCausalLM

        torch.manual_seed(seed)
        cfg = qwen3_config(len(tokenizer), size.hidden_size, size.target_layers, size.heads, size.kv_heads,
                           size.head_dim, size.intermediate_size, 4 * size.seq_len, special)
        model = Qwen3ForCausalLM(cfg).to(device)
        info = train_target(model, train_records, tokenizer, steps=size.target_steps, batch=size.target_batch,
                            seq_len=size.seq_len, lr=size.target_lr, seed=seed, progress=progress)
        save_target(model, paths.tokenizer, paths.target)
        done("target", t0, **info)
    target, _ = load_target(paths.target, device=device)
    runner = TargetRunner(target, list(size.target_layer_ids))

    # 4. self-distillation: the target answers the training prompts
    t0 = time.monotonic()
    if force or not paths.selfdistill.is_file():
        picked = [r for d in DOMAINS for r in select(records, "train", d)[: size.regen_prompts_per_domain]]
        # keep each prompt's end (its <|assistant|> marker) when it is longer than half a training sequence
        prompts = [p[-(size.seq_len // 2):] for p in encode_prompts(tokenizer, picked)]
        answers = regenerate(runner, prompts, max_new=size.regen_max_new, temperature=REGEN_TEMPERATURE,
                             eos_id=tokenizer.eos_token_id, seed=seed + 1, batch=64, progress=progress)
        torch.save({"prompts": prompts, "answers": answers, "domains": [r.domain for r in picked]},
                   paths.selfdistill.with_suffix(".tmp"))
        paths.selfdistill.with_suffix(".tmp").replace(paths.selfdistill)
        done("selfdistill", t0, sequences=len(prompts), answer_tokens=sum(len(a) for a in answers),
             temperature=REGEN_TEMPERATURE)
    sd = torch.load(paths.selfdistill)
    data = DistillData.from_pairs(sd["prompts"], sd["answers"], size.seq_len, tokenizer.pad_token_id)

    # 5. drafters, trained together on one stream of target forwards
    kinds = list(DRAFTER_KINDS) + (list(VARIANT_KINDS) if variants else [])
    todo = [k for k in kinds if force or not (paths.drafter(k) / "config.json").is_file()]
    t0 = time.monotonic()
    if todo:
        drafters = {}
        for i, kind in enumerate(todo):
            torch.manual_seed(seed + 100 + i)
            m = build_drafter(drafter_config(kind, size, target.config, tokenizer.mask_token_id)).to(device)
            m.share_target_embeddings(target)
            drafters[kind] = m
        progress("drafters: " + ", ".join(f"{k} {sum(p.numel() for p in m.parameters() if p.requires_grad) / 1e6:.2f}M "
                                          "trainable" for k, m in drafters.items()))
        summary = train_drafters(runner, drafters, data, steps=size.drafter_steps, batch=size.drafter_batch,
                                 num_anchors=size.num_anchors, lr=size.drafter_lr, seed=seed + 2, progress=progress)
        for kind, m in drafters.items():
            save_drafter(m, paths.drafter(kind))
        # a later `--variants` run trains only the missing drafters: keep the main ones' record
        done("drafters" if set(todo) & set(DRAFTER_KINDS) else "drafters-variants", t0, trained=todo, final=summary)

    # 6. STS calibration on the held-out calibration split
    t0 = time.monotonic()
    cal_info = {}
    for kind in kinds:
        drafter, cal = load_drafter(paths.drafter(kind), target=target, device=device)
        if drafter.confidence_head is None or (cal is not None and not force and kind not in todo):
            continue
        from .calibrate import fit_sts

        calib = eval_records(records, "calib", size.calib_prompts_per_domain)
        blocks = run_blocks(runner, drafter, tokenizer, calib, max_new=size.eval_max_new,
                            temperature=EVAL_TEMPERATURE, batch=size.eval_batch, seed=seed + 3, progress=progress,
                            label=f"calibrate {kind}")
        cal = fit_sts(blocks)
        cal["temperature"] = EVAL_TEMPERATURE
        save_calibration(paths.drafter(kind), cal)
        cal_info[kind] = {"temperatures": cal["temperatures"], "n_blocks": cal["n_blocks"]}
        progress(f"calibrate {kind}: STS temperatures {[round(t, 2) for t in cal['temperatures']]}")
    if cal_info:
        main_cal = "calibration" if set(cal_info) & set(DRAFTER_KINDS) else "calibration-variants"
        done(main_cal, t0, drafters=cal_info)
    manifest["total_seconds"] = round(sum(s["seconds"] for s in stages.values()), 1)
    atomic_write_text(paths.manifest, json.dumps(manifest, indent=2))
    progress(f"build-tiny ({size.name}) done: {paths.root} (stages total {manifest['total_seconds']}s)")
    return manifest


# ----------------------------------------------------------------------------------------------------------- CLI

import click  # noqa: E402

from .user_errors import reports_user_errors  # noqa: E402


@click.command("build-tiny")
@click.option("--size", default="full", show_default=True, help="World size: full (documented results) or smoke.")
@click.option("--data-dir", default=None, help="Data directory [default: $DSPARK_DATA or .dspark-data].")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option("--variants", is_flag=True, help="Also train the Gated and RNN DSpark heads.")
@click.option("--force", is_flag=True, help="Rebuild every stage even if its output exists.")
@click.option("--threads", default=None, type=int, help="CPU threads for torch [default: torch's choice].")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@reports_user_errors
def build_tiny_command(size, data_dir, seed, device, variants, force, threads, quiet):
    """Build the tiny world: corpus, tokenizer, Qwen3 target, self-distilled drafters, STS calibration."""
    from .target import resolve_device
    from .world import world_paths, world_size

    spec = world_size(size)
    resolve_device(device)
    set_threads(threads)
    paths = world_paths(data_dir, size)
    manifest = build_tiny(paths, spec, seed=seed, device=device, variants=variants, force=force,
                          progress=Progress(quiet=quiet))
    click.echo(json.dumps({"data_dir": str(paths.root), "total_seconds": manifest["total_seconds"],
                           "stages": {k: v["seconds"] for k, v in manifest["stages"].items()}}))
