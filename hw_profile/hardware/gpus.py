"""Datasheet figures of named accelerators (dense tensor throughput per dtype, memory bandwidth and size, board power,
NVLink bandwidth). Dense figures throughout: where a datasheet quotes 2:4-sparse throughput, it is halved.

Sources (NVIDIA product datasheets; SXM variants):

- A100: "NVIDIA A100 Tensor Core GPU" datasheet, A100 80GB SXM column: BF16 312 TFLOPS (624 sparse), TF32 156,
  no FP8; HBM2e 80 GB at 2,039 GB/s; max TDP 400 W; NVLink 600 GB/s.
- H100: "NVIDIA H100 Tensor Core GPU" datasheet, H100 SXM column: BF16 1,979 TFLOPS sparse (989.4 dense), FP8
  3,958 sparse (1,979 dense), TF32 989 sparse (494.7 dense); 80 GB HBM3 at 3.35 TB/s; up to 700 W; NVLink 900 GB/s.
- H200: "NVIDIA H200 Tensor Core GPU" datasheet, H200 SXM column: tensor figures as H100 SXM; 141 GB HBM3e at
  4.8 TB/s; up to 700 W; NVLink 900 GB/s.
- H800: "NVIDIA H800 Tensor Core GPU" datasheet, H800 SXM5 column: tensor figures as H100 SXM (BF16 1,979 sparse,
  FP8 3,958 sparse); 80 GB HBM3 at 3.35 TB/s; up to 700 W; NVLink 400 GB/s (the export-reduced interconnect).
- H20: "NVIDIA HGX H20" product brief: BF16 148 TFLOPS, FP8 296, TF32 74 (dense); 96 GB HBM3 at 4.0 TB/s;
  400 W; NVLink 900 GB/s.
- H20-141G: the H20 with 141 GB of HBM3e (2024 refresh). NVIDIA published no separate datasheet; OEM listings
  give the H20's tensor rates (BF16 148, FP8 296, TF32 74 dense) with 141 GB HBM3e at 4.8 TB/s (the H200's
  stacks) and NVLink 900 GB/s. Uncertain: the board power, taken as the H20's 400 W.
- B200: "NVIDIA HGX B200" datasheet (8-GPU totals divided by 8, the 1,000 W HGX configuration): BF16 2.25 PFLOPS
  dense (4.5 sparse), FP8 4.5 dense, TF32 1.1 dense, FP4 72 PFLOPS per 8 dense (144 sparse): 9 per GPU; 180 GB
  HBM3e (1,440 GB per 8) at 8 TB/s; 1,000 W; NVLink 5 at 1.8 TB/s.
- B300: "NVIDIA HGX B300" datasheet (Blackwell Ultra; 8-GPU totals divided by 8): FP4 144 PFLOPS sparse, 108
  dense (13.5 per GPU); FP8/FP6 72 sparse (4.5 dense per GPU), BF16 36 sparse (2.25 dense), TF32 18 sparse
  (1.125 dense): the B200's rates but FP4; 2.3 TB HBM3e per 8 (288 GB each) at 8 TB/s; NVLink 5 at 1.8 TB/s.
  Uncertain: dense FP4 (some spec tables give 105 PFLOPS per 8, 13.1 per GPU) and the board power (1,100 W
  in HGX systems as reported by OEMs; NVIDIA's HGX page gives none).
- GB300: "NVIDIA GB300 NVL72" datasheet, rack totals divided by its 72 GPUs: FP4 1,440 PFLOPS sparse, 1,080
  dense (15 per GPU); FP8/FP6 720 sparse (5 dense per GPU), BF16 360 sparse (2.5 dense), TF32 180 sparse
  (1.25 dense); up to 21 TB HBM3e at 576 TB/s (288 GB and 8 TB/s per GPU); NVLink 130 TB/s (1.8 TB/s per
  GPU). Uncertain: the board power, 1,400 W per GPU as configured in NVL72 racks (reported, not in the datasheet).
- GB200: "NVIDIA GB200 NVL72" datasheet, rack totals divided by its 72 GPUs: FP4 1,440 PFLOPS sparse (720
  dense, 10 per GPU), FP8/FP6 720 sparse (5 dense per GPU), BF16 360 sparse (2.5 dense), TF32 180 sparse (1.25
  dense); up to 13.4 TB HBM3e at 576 TB/s (186 GB and 8 TB/s per GPU); NVLink 1.8 TB/s per GPU. Uncertain: the
  board power, 1,200 W per GPU as configured in NVL72 racks (reported, not in the datasheet).
- L40S: "NVIDIA L40S" datasheet: FP8 1,466 TFLOPS sparse (733 dense), BF16 733 sparse (366.5 dense), TF32 366
  sparse (183 dense); 48 GB GDDR6 at 864 GB/s; 350 W; PCIe only (no NVLink: ``nvlink_gb_s`` left unset, PCIe
  Gen4 x16's 64 GB/s is what an all-reduce would get).
- RTX-PRO-6000: "NVIDIA RTX PRO 6000 Blackwell Server Edition" datasheet: FP4 4 PFLOPS sparse (2,000 dense),
  FP8 1,000 dense, BF16 500 dense (uncertain: NVIDIA's sheet quotes FP4 peak only; the others are its halvings, as
  on every Blackwell part); 96 GB GDDR7 at 1.6 TB/s; 600 W; PCIe Gen5 only.
- B60: "Intel Arc Pro B60" product brief: 197 TOPS INT8 on its XMX engines, so about 98.5 TFLOPS BF16/FP16 dense
  (uncertain: Intel quotes INT8 only); 24 GB GDDR6 at 456 GB/s; 200 W; no FP8 matrix rate; PCIe Gen5 x8.

AMD Instinct (OAM modules; AMD quotes dense and sparse rates separately, dense is used):

- MI300X: "AMD Instinct MI300X" datasheet: BF16 1,307.4 TFLOPS (2,614.9 with sparsity), FP8 2,614.9 (5,229.8),
  TF32 653.7; 192 GB HBM3 at 5.3 TB/s; 750 W; Infinity Fabric 7 links x 128 GB/s = 896 GB/s (in the NVLink
  field: the all-reduce link of an 8-GPU node). No FP4.
- MI325X: "AMD Instinct MI325X" datasheet: the MI300X's compute (BF16 1,307.4 TFLOPS, FP8 2,614.9, TF32 653.7) with
  256 GB HBM3E at 6 TB/s; 1,000 W; the MI300X's Infinity Fabric (896 GB/s). No FP4.
- MI350X: "AMD Instinct MI350X" (CDNA 4, the air-cooled MI355X: the same die at 2.2 GHz against 2.4, 1,000 W): the
  MI355X's rates x 2.2 / 2.4, BF16 2,306.9 TFLOPS, FP8 4,613.8, MXFP4 9,227.5 (AMD's material: 2.3, 4.6 and 9.2
  PFLOPS), FP32 matrix 144.2; 288 GB HBM3E at 8 TB/s; the MI355X's Infinity Fabric.
- MI355X: "AMD Instinct MI355X" datasheet (CDNA 4): BF16 2,516.6 TFLOPS dense (5,033.2 sparse), FP8 5,033.2
  (10,066.4), MXFP4/MXFP6 10,066.4 dense (20.1 PFLOPS is with sparsity); 288 GB HBM3E at 8 TB/s; 1,400 W
  (liquid-cooled); Infinity Fabric 7 links x 153.6 GB/s = 1,075 GB/s. CDNA 4 has no TF32 matrix rate: the fp32
  field holds its FP32 matrix rate, 157.3 TFLOPS. Uncertain: the decimals of the BF16/FP8/FP4 rates (AMD's
  launch material rounds them to 2.5, 5 and 10 PFLOPS).

FP4 (``fp4_tflops``, dense) is set for the parts with FP4 tensor/matrix cores (B200, B300, GB200, GB300,
RTX-PRO-6000, MI350X, MI355X) and None
elsewhere; ``peak_tflops("fp4")`` falls back to the FP8 rate, then the 16-bit rate, on a part without it (FP4
weights are then unpacked to the wider type the part multiplies in).

``idle_w`` is not a datasheet figure: 90 W is what an idle H100/H200 SXM board typically reports; the other parts
use the same fraction of their board power (about 13%). It only shapes the energy estimate at low load.

Beside its figures, each entry says where the part sits, as data rather than rules on its name:

- ``vendor`` (``VENDORS``): the AMD parts' kernel floors are borrowed from NVIDIA parts, and the estimate says so;
- ``nvlink_domain``: GPUs that share one NVLink (or Infinity Fabric) fabric, across which an expert-parallel
  exchange runs without a NIC: 72 for the Grace-Blackwell NVL72 parts (GB200, GB300, a rack of 72), 8 for an
  HGX/OAM board of 8 (the SXM and OAM parts). The PCIe-only parts (L40S, RTX-PRO-6000, B60) say 8 too, the GPUs
  of one node, which exchange over PCIe: the estimate has no PCIe exchange model and prices theirs at the NVLink
  rates of the rule this field replaced (a known gap, kept so that no table changed with the move to data; a
  device file may set 1 to price such a node's exchange as across nodes instead);
- ``kernel_db_system``: the folder of aiconfigurator-core's measured kernel database that holds this part's kernels
  (the SXM board's where the database has both), None where it has none. A part the database measures is
  therefore this entry alone: ``hw_profile.kernels.database`` maps systems to GPUs by reading it.

Memory as the device reports it (``device_memory_bytes``): the engines size their KV pools from what the CUDA
driver reports, not from the datasheet's GB of HBM. Two figures where a public log gives them:

- ``smi_memory_mib``: ``nvidia-smi``'s ``memory.total`` (SGLang picks its default ``mem_fraction_static`` from it):
  H100 81,559 MiB, A100 (80 GB) 81,920 MiB, B200 183,359 MiB (pasted nvidia-smi output in public issues:
  wilicc/gpu-burn#114, modal-labs/modal-client#2797, NVIDIA/TensorRT-LLM#10278), H200 143,771 MiB (the commonly
  quoted total; not confirmed from a pasted log here);
- ``cuda_memory_gib``: the CUDA driver's total (``cudaMemGetInfo``, ``torch.cuda.mem_get_info``: what vLLM
  multiplies ``gpu_memory_utilization`` by): H100 79.11 GiB and A100 (80 GB) 79.14 GiB (PyTorch's out-of-memory
  messages "total capacity of ..." in vllm-project/vllm#27508 and lianqi1008/Control-GIC#6), H200 139.8 GiB
  (torch's total on the H200 this project measured, scenarios/hardware/h200-qwen3-8b-bf16-measured.json:
  150.1e9 bytes), B200 178.36 GiB (a vLLM start-up line in vllm-project/vllm#21489 whose GPU is not named: ASSUMED
  a B200 from its size).

A part without them is taken to report its datasheet's GB as GiB less 1.1% (``REPORTED_SHARE``: H100 79.11 of 80,
A100 79.14 of 80, H200 139.8 of 141 and B200 178.36 of 180 GiB give 0.989-0.991): marketed HBM sizes are binary.

A device that is not listed (another GPU, or the CPU a table was measured on) can be given as a JSON file with the
fields of ``GPU`` (see ``gpu_from_file``); ``hw-profile peaks`` writes one for the machine at hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from hw_profile.errors import HwProfileError


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_tflops: float  # dense
    hbm_tb_s: float
    memory_gb: float
    tdp_w: float  # NaN where unknown: no energy estimate
    idle_w: float
    fp8_tflops: float | None = None  # dense; None: no FP8 tensor cores, FP8 weights run at the 16-bit rate
    tf32_tflops: float | None = None  # dense; what fp32 matmuls reach with TF32 enabled (serving stacks enable it)
    nvlink_gb_s: float | None = None  # datasheet NVLink bandwidth (bidirectional, per GPU)
    fp4_tflops: float | None = None  # dense; None: no FP4 tensor cores
    vendor: str | None = None  # one of VENDORS; None: not stated (a device file may leave it out)
    # GPUs sharing one NVLink fabric; a device file that does not say is taken for a board of 8, as HGX parts are
    nvlink_domain: int = 8
    kernel_db_system: str | None = None  # the kernel database's system folder for this part; None: not measured
    smi_memory_mib: float | None = None  # nvidia-smi's memory.total (module docstring); None: not known
    cuda_memory_gib: float | None = None  # the CUDA driver's total memory (module docstring); None: not known

    @property
    def device_memory_bytes(self) -> float:
        """Bytes of memory the device reports to the engines: the CUDA driver's total where it is known, else the
        datasheet's GB read as GiB less what drivers keep (``REPORTED_SHARE``)."""
        if self.cuda_memory_gib:
            return self.cuda_memory_gib * 2.0**30
        return self.memory_gb * 2.0**30 * REPORTED_SHARE

    @property
    def smi_mib(self) -> float:
        """nvidia-smi's total in MiB: the recorded figure, else the datasheet's GB read as GiB."""
        return self.smi_memory_mib or self.memory_gb * 1024.0

    def peak_tflops(self, dtype: str) -> float:
        """Dense matmul peak for weights and activations in ``dtype``. fp4 on a part without FP4 cores runs at its
        FP8 rate, or its 16-bit rate without FP8 either; fp8 without FP8 cores at the 16-bit rate."""
        if dtype == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
        if dtype in ("fp8", "fp4") and self.fp8_tflops:
            return self.fp8_tflops
        if dtype == "fp32":
            return self.tf32_tflops if self.tf32_tflops else self.bf16_tflops / 2.0
        return self.bf16_tflops

    def to_dict(self) -> dict:
        """The datasheet's figures, leaving out optional ones that are unset (so older sidecars read the same). Where
        the part sits (``PLACEMENT``: vendor, NVLink domain, kernel-database system) is left out too: a sidecar
        records the rates a table was priced at, and a device file written from it is then a part the kernel
        database does not measure (its twin's kernels price it, ``kernel_twin``)."""
        return {k: v for k, v in asdict(self).items() if v is not None and k not in PLACEMENT}


# a datasheet's GB of HBM are GiB, of which the driver reports about this share (module docstring)
REPORTED_SHARE = 0.99

VENDORS = ("nvidia", "amd", "intel")
# GPU's fields that say where a part sits rather than how fast it is (see ``GPU.to_dict``)
PLACEMENT = ("vendor", "nvlink_domain", "kernel_db_system")


GPUS: dict[str, GPU] = {
    "A100": GPU("A100", bf16_tflops=312.0, hbm_tb_s=2.039, memory_gb=80, tdp_w=400, idle_w=52,
                fp8_tflops=None, tf32_tflops=156.0, nvlink_gb_s=600,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="a100_sxm",
                smi_memory_mib=81920, cuda_memory_gib=79.14),
    "H100": GPU("H100", bf16_tflops=989.4, hbm_tb_s=3.35, memory_gb=80, tdp_w=700, idle_w=90,
                fp8_tflops=1978.9, tf32_tflops=494.7, nvlink_gb_s=900,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="h100_sxm",
                smi_memory_mib=81559, cuda_memory_gib=79.11),
    "H200": GPU("H200", bf16_tflops=989.4, hbm_tb_s=4.8, memory_gb=141, tdp_w=700, idle_w=90,
                fp8_tflops=1978.9, tf32_tflops=494.7, nvlink_gb_s=900,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="h200_sxm",
                smi_memory_mib=143771, cuda_memory_gib=139.8),
    "H800": GPU("H800", bf16_tflops=989.4, hbm_tb_s=3.35, memory_gb=80, tdp_w=700, idle_w=90,
                fp8_tflops=1978.9, tf32_tflops=494.7, nvlink_gb_s=400,
                vendor="nvidia", nvlink_domain=8),
    "H20": GPU("H20", bf16_tflops=148.0, hbm_tb_s=4.0, memory_gb=96, tdp_w=400, idle_w=52,
               fp8_tflops=296.0, tf32_tflops=74.0, nvlink_gb_s=900,
               vendor="nvidia", nvlink_domain=8),
    "H20-141G": GPU("H20-141G", bf16_tflops=148.0, hbm_tb_s=4.8, memory_gb=141, tdp_w=400, idle_w=52,
                    fp8_tflops=296.0, tf32_tflops=74.0, nvlink_gb_s=900,
                    vendor="nvidia", nvlink_domain=8),
    "B200": GPU("B200", bf16_tflops=2250.0, hbm_tb_s=8.0, memory_gb=180, tdp_w=1000, idle_w=130,
                fp8_tflops=4500.0, tf32_tflops=1100.0, nvlink_gb_s=1800, fp4_tflops=9000.0,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="b200_sxm",
                smi_memory_mib=183359, cuda_memory_gib=178.36),
    "B300": GPU("B300", bf16_tflops=2250.0, hbm_tb_s=8.0, memory_gb=288, tdp_w=1100, idle_w=143,
                fp8_tflops=4500.0, tf32_tflops=1125.0, nvlink_gb_s=1800, fp4_tflops=13500.0,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="b300_sxm"),
    "GB300": GPU("GB300", bf16_tflops=2500.0, hbm_tb_s=8.0, memory_gb=288, tdp_w=1400, idle_w=182,
                 fp8_tflops=5000.0, tf32_tflops=1250.0, nvlink_gb_s=1800, fp4_tflops=15000.0,
                 vendor="nvidia", nvlink_domain=72, kernel_db_system="gb300"),
    "GB200": GPU("GB200", bf16_tflops=2500.0, hbm_tb_s=8.0, memory_gb=186, tdp_w=1200, idle_w=156,
                 fp8_tflops=5000.0, tf32_tflops=1250.0, nvlink_gb_s=1800, fp4_tflops=10000.0,
                 vendor="nvidia", nvlink_domain=72, kernel_db_system="gb200"),
    "L40S": GPU("L40S", bf16_tflops=366.5, hbm_tb_s=0.864, memory_gb=48, tdp_w=350, idle_w=46,
                fp8_tflops=733.0, tf32_tflops=183.0,
                vendor="nvidia", nvlink_domain=8, kernel_db_system="l40s"),
    "RTX-PRO-6000": GPU("RTX-PRO-6000", bf16_tflops=500.0, hbm_tb_s=1.6, memory_gb=96, tdp_w=600, idle_w=78,
                        fp8_tflops=1000.0, fp4_tflops=2000.0,
                        vendor="nvidia", nvlink_domain=8, kernel_db_system="rtx_pro_6000_server"),
    "B60": GPU("B60", bf16_tflops=98.5, hbm_tb_s=0.456, memory_gb=24, tdp_w=200, idle_w=26,
               vendor="intel", nvlink_domain=8, kernel_db_system="b60"),
    "MI300X": GPU("MI300X", bf16_tflops=1307.4, hbm_tb_s=5.3, memory_gb=192, tdp_w=750, idle_w=98,
                  fp8_tflops=2614.9, tf32_tflops=653.7, nvlink_gb_s=896,
                  vendor="amd", nvlink_domain=8),
    "MI325X": GPU("MI325X", bf16_tflops=1307.4, hbm_tb_s=6.0, memory_gb=256, tdp_w=1000, idle_w=130,
                  fp8_tflops=2614.9, tf32_tflops=653.7, nvlink_gb_s=896,
                  vendor="amd", nvlink_domain=8),
    "MI350X": GPU("MI350X", bf16_tflops=2306.9, hbm_tb_s=8.0, memory_gb=288, tdp_w=1000, idle_w=130,
                  fp8_tflops=4613.8, tf32_tflops=144.2, nvlink_gb_s=1075, fp4_tflops=9227.5,
                  vendor="amd", nvlink_domain=8),
    "MI355X": GPU("MI355X", bf16_tflops=2516.6, hbm_tb_s=8.0, memory_gb=288, tdp_w=1400, idle_w=182,
                  fp8_tflops=5033.2, tf32_tflops=157.3, nvlink_gb_s=1075, fp4_tflops=10066.4,
                  vendor="amd", nvlink_domain=8),
}

# Other spellings of a name (after upper-casing, with "_" and spaces read as "-")
ALIASES: dict[str, str] = {"H20-141GB": "H20-141G", "H20-141": "H20-141G", "RTX-PRO-6000-SERVER": "RTX-PRO-6000",
                           "ARC-PRO-B60": "B60", "MI325": "MI325X"}


def gpu_names() -> list[str]:
    return sorted([*GPUS, *ALIASES])


def named_gpu(device: object) -> GPU | None:
    """The listed part a device string names, as a driver reports it (``NVIDIA H200`` is the H200; a variant such
    as an H100 PCIe is read as the listed part); None when the list does not know it. A measurement records the
    datasheet it finds here once, in its sidecar's ``gpu`` block, so that no reader parses device names."""
    words = str(device or "").replace("NVIDIA", " ").replace("AMD", " ").replace("Instinct", " ").split()
    for name in (words[0], words[0].split("-")[0]) if words else ():
        try:
            return get_gpu(name)
        except KeyError:
            continue
    return None


def get_gpu(name: str) -> GPU:
    """A named GPU, or a device described by a JSON file (a path ending in .json)."""
    if str(name).endswith(".json"):
        return gpu_from_file(name)
    key = str(name).strip().upper().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key not in GPUS:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(gpu_names())} (any case, '_' for '-'), or a device "
                       ".json file")
    return GPUS[key]


def gpu_from_file(path: str | Path) -> GPU:
    """A device from a JSON object with GPU's fields (name, bf16_tflops, hbm_tb_s, memory_gb; tdp_w and idle_w
    optional, absent meaning no energy estimate; vendor and nvlink_domain optional, but not kernel_db_system, which
    only a ``GPUS`` entry names). A table sidecar with a ``device_peaks`` object also works."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise HwProfileError(f"{path}: not a readable device file ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("device_peaks"), dict):
        data = data["device_peaks"]
    if not isinstance(data, dict):
        raise HwProfileError(f"{path}: a device file must hold a JSON object")
    if "kernel_db_system" in data:
        raise HwProfileError(f"{path}: field 'kernel_db_system' is read from GPUS entries only (the kernel database "
                             "is looked up by GPU name); add an entry in hw_profile/hardware/gpus.py for a part it "
                             "measures, or leave the field out")
    known = {f.name for f in fields(GPU)}
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs.setdefault("tdp_w", math.nan)
    kwargs.setdefault("idle_w", math.nan)
    for key in ("name", "bf16_tflops", "hbm_tb_s", "memory_gb"):
        if key not in kwargs:
            raise HwProfileError(f"{path}: field {key!r} missing; a device file needs name, bf16_tflops, hbm_tb_s, memory_gb")
    for key in ("bf16_tflops", "hbm_tb_s", "memory_gb"):
        if not isinstance(kwargs[key], int | float) or not kwargs[key] > 0:
            raise HwProfileError(f"{path}: field {key!r} must be a positive number, got {kwargs[key]!r}")
    for key in ("tdp_w", "idle_w"):
        if kwargs[key] is None:
            kwargs[key] = math.nan
    if kwargs.get("vendor") is not None and kwargs["vendor"] not in VENDORS:
        raise HwProfileError(f"{path}: field 'vendor' must be one of {', '.join(VENDORS)}, got {kwargs['vendor']!r}")
    domain = kwargs.get("nvlink_domain", 8)
    if isinstance(domain, bool) or not isinstance(domain, int) or domain < 1:
        raise HwProfileError(f"{path}: field 'nvlink_domain' must be a positive whole number of GPUs, got {domain!r}")
    return GPU(**kwargs)
