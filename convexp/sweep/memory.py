"""A job's estimated peak GPU memory, from its composed config and without torch: what
``launcher.per_gpu=auto`` packs a card by (sweep/gpus.py), so that a sweep's small fine-tunes
share a card and a large pre-training gets one to itself.

peak = state + activations + heads + overhead, summed over every model the job trains (an ELECTRA
generator too), on one card (``trainer.batch_size`` split over devices x nodes x accumulation):

* state: 16 bytes a parameter (fp32 weights, their gradients, AdamW's two moments; mixed precision
  keeps fp32 masters, so the same), + 2 under a 16-bit autocast (``*-mixed``: its copy of each
  weight, cached for the step). Parameters from shapes (models/stats.py); fine-tuning drops the MLM
  head and its classifier is left out (a few thousand parameters).
* activations: what autograd keeps for the backward, counted per token and layer as Korthikanti
  et al. 2022 count a transformer layer ("Reducing Activation Recomputation in Large Transformer
  Models", §4.1: sbh(34 + 5as/h) bytes at 2 bytes a value, FFN 4h): ``4D + 4A + 2I`` values (the
  two LayerNorms' inputs 2D, the Q/K/V projections' input D, Q, K and V 3A, the output
  projection's input A, the FFN's input D and its hidden values before and after GELU 2I; D
  hidden, A self-attention width, I FFN width) + 2D bytes of dropout masks, and per head an
  L-long row of attention probabilities, its dropout output (2 values) and mask (1 byte). A value
  is 4 bytes, 2 under a 16-bit precision (but the residual stream, the LayerNorms' inputs, stays
  fp32 under autocast, which runs LayerNorm in fp32). That row is what the unfused path keeps (the CPU path
  under dropout, Chang et al.'s convolution-only attention); CUDA's fused attention keeps none, so
  plain attention on a GPU is over-counted (BERT-base: those rows are 21% of its estimated
  activations at length 128, 52% at 512): the estimate errs on the side of room.
  ConvBERT's mixed attention adds its convolution branch: the span-aware key's input and
  depthwise output (2D), ks and ks⊙q (2A), the convolution's values, output and share of the
  output projection's input (3C), the kernels' logits and softmax (2cK; C = c heads x d, span K),
  and the banded [L, L] matrix per convolution head that the GPU's band form multiplies (c L values;
  models/conv.py). With ``trainer.gradient_checkpointing`` a layer keeps its input (D) and one
  layer at a time holds the rest. Embeddings: 3E + D values a token.
* heads: pre-training's MLM head scores P = batch x min(max_predictions, mask_prob x L) rows:
  their [P, V] logits and cross-entropy's fp32 log-softmax of them (an ELECTRA generator's the same;
  its embeddings, shared with the discriminator, are counted twice).
* overhead: ``OVERHEAD_MIB`` for the CUDA context, cuBLAS's workspaces and the caching
  allocator's slack.

Checked on the CPU (tests/test_gpu_memory.py): the activation term is 0.88 (ELECTRA-small) to 0.99
(ConvBERT-small) of the bytes autograd saves there. Checked on an H100 (.ci/rates_probe, torch 2.11,
2026-12-05; the card's memory in use at its peak, nvidia-smi, the caching allocator's reserve
included) at the papers' batch and length: ConvBERT-small ELECTRA 128 x 128 estimated 7.3 GiB,
used 7.0 (fp32), 4.6 against 5.2 (bf16-mixed); ConvBERT-base ELECTRA 256 x 128 38.2 against 34.7
(fp32), 23.1 against 24.6 (bf16-mixed); Chang et al.'s small MLM 5.5 against 4.4 (fp32): from 10%
under (bf16-mixed, where the reserve is the difference) to 23% over. Not counted: a fine-pruning run's scores (pruning=...: one more trained tensor per pruned
weight), a distillation teacher's weights, the allocator's fragmentation beyond the overhead.
So the numbers are a plan, and an out-of-memory error in a packed job says the truth (it is run
again alone on its card, sweep/launchers.py).
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from ..models.config import ModelConfig, generator_config
from ..models.parts import builtin_part
from ..models.stats import parameter_count

MIB = 2**20
OVERHEAD_MIB = 768  # the CUDA context (~0.5 GiB) + cuBLAS workspaces + allocator slack
STATE_BYTES = 16  # a parameter: fp32 weight + gradient + AdamW's exp_avg and exp_avg_sq


def _value_bytes(precision) -> int:
    """Bytes of one activation value: 2 under bf16/fp16 (autocast or true), else 4."""
    return 2 if "16" in str(precision) else 4


def _layer_bytes(cfg: ModelConfig, i: int, seq_len: int, v: int, residual: int) -> float:
    """Bytes layer ``i`` keeps for the backward, per token (see the module docstring): its
    self-attention's and feed-forward's, and what its mixer keeps beyond (its part's
    ``extra_saved``: ConvBERT's convolution branch; a user's mixer is taken as self-attention).
    ``residual``: bytes of the two LayerNorms' inputs, the residual stream (4 under autocast, which
    runs LayerNorm in fp32 and so keeps the stream in fp32; else ``v``)."""
    D, d = cfg.hidden_size, cfg.head_dim
    size = cfg.layer_size(i)
    H, I = size["heads"], size["intermediate"]
    A = H * d
    values = 4 * D + 4 * A + 2 * I
    maps = H * seq_len * (2 * v + 1)  # per head: probabilities and their dropout (values) + mask (byte)
    part = builtin_part(cfg, "mixer")
    more_values, more_maps = part.extra_saved(cfg, i, seq_len) if part is not None else (0, 0)
    return (values + more_values) * v + 2 * D * (residual - v) + 2 * D + maps + more_maps * v


def activation_bytes(cfg: ModelConfig, batch: int, seq_len: int, v: int, checkpointing: bool,
                     residual: int | None = None) -> float:  # fmt: skip
    """Activation bytes of one model's encoder (embeddings included) for a batch; ``residual``: bytes
    of a residual-stream value (default ``v``)."""
    layers = [_layer_bytes(cfg, i, seq_len, v, residual or v) for i in range(cfg.num_layers)]
    if checkpointing:  # each block keeps its input; one is recomputed at a time
        per_token = cfg.num_layers * cfg.hidden_size * v + max(layers)
    else:
        per_token = sum(layers)
    per_token += (3 * cfg.emb_size + cfg.hidden_size) * v
    return per_token * batch * seq_len


def peak_mib(
    cfg: ModelConfig,
    batch: int,
    seq_len: int,
    precision="32-true",
    *,
    predictions: int = 0,
    checkpointing: bool = False,
) -> int:
    """Estimated peak GPU memory (MiB) of training ``cfg`` on ``batch`` rows of ``seq_len`` tokens
    on one card; ``predictions``: rows an MLM head scores (0: a fine-tuning head, not counted)."""
    v = _value_bytes(precision)
    mixed = "mixed" in str(precision)
    state = STATE_BYTES + (2 if mixed else 0)
    params = parameter_count(cfg, mlm_head=predictions > 0)
    total = params * state + activation_bytes(cfg, batch, seq_len, v, checkpointing, residual=4 if mixed else v)
    total += predictions * cfg.vocab_size * (v + 4)  # logits + cross-entropy's fp32 log-softmax
    return math.ceil(total / MIB) + OVERHEAD_MIB


def card_batch(trainer: DictConfig) -> int:
    """Rows on one card in one forward: ``trainer.batch_size`` over devices x nodes x accumulation
    (``devices=auto`` or a list: the whole batch, the larger estimate)."""
    devices = trainer.get("devices", 1)
    world = devices * trainer.get("num_nodes", 1) if isinstance(devices, int) and devices > 0 else 1
    return max(1, int(trainer.batch_size) // (world * int(trainer.get("accumulate_grad_batches", 1))))


def pretrain_mib(cfg: DictConfig, model_cfg: ModelConfig) -> int:
    """A pre-training job's estimate: the model and, with ``objective=electra``, its generator,
    each scoring its predictions (the generator the MLM, the discriminator every token: no [P, V])."""
    batch, L = card_batch(cfg.trainer), int(cfg.seq_len)
    o = cfg.objective
    per_row = round(float(o.mask_prob) * L)
    if o.get("max_predictions") is not None:
        per_row = min(per_row, int(o.max_predictions))
    predictions = batch * max(1, per_row)
    t = cfg.trainer
    common = dict(precision=t.precision, checkpointing=bool(t.get("gradient_checkpointing", False)))
    if o.name != "electra":
        return peak_mib(model_cfg, batch, L, predictions=predictions, **common)
    gen = generator_config(model_cfg, o.generator_fraction)
    disc = peak_mib(model_cfg, batch, L, predictions=0, **common)
    return disc + peak_mib(gen, batch, L, predictions=predictions, **common) - OVERHEAD_MIB


def finetune_mib(cfg: DictConfig, model_cfg: ModelConfig | None, task: str, batch: int) -> int:
    """A fine-tuning job's estimate at its largest ``batch`` (a node's grid settings run one after
    another in one process) and the length its kind trains on (tasks/kind.py ``sequence_length``:
    ``task.max_len``, SQuAD's window); 0 when the model is unknown."""
    if model_cfg is None:
        return 0
    from ..tasks import config_kind, task_kind

    length = task_kind(config_kind(cfg)).sequence_length(cfg)
    checkpointing = bool(cfg.trainer.get("gradient_checkpointing", False))
    return peak_mib(model_cfg, batch, length, cfg.trainer.precision, checkpointing=checkpointing)


# ----------------------------------------------------------------------------- host memory

# One training process on the host with torch, Lightning, datasets and W&B imported: 0.76-0.83 GiB
# (PSS, measured on a 2-core AMD EPYC, smoke pre-training and fine-tuning, torch 2.13 CPU build),
# rounded up. On a card the same 1 GiB holds: an H100's jobs at the papers' sizes (.ci/rates_probe,
# torch 2.11, 2026-12-05; process tree with two loader workers, PSS at its peak) took 1.9 GiB
# (ConvBERT-small's fine-tune), 2.2 (its ELECTRA stage), 3.0 (ConvBERT-base's fine-tune) and 3.4-3.5
# (its ELECTRA stage), each under this estimate before its margin (2.2, 2.3, 3.6 and 4.1 GiB).
HOST_BASE_MIB = 1024
LOADER_MIB = 512  # one loader worker process (a streamed corpus's reader tokenises in it)
HOST_MARGIN = 1.25  # the request's room over the estimate (the allocator's slack, page cache)


def state_mib(params: int) -> int:
    """The model and AdamW's state as a checkpoint holds it (fp32 weights and two moments, 12 bytes
    a parameter; 16 with the gradients), in MiB."""
    return math.ceil(params * STATE_BYTES / MIB)


def trained_parameters(cfg: DictConfig, model_cfg: ModelConfig) -> int:
    """Parameters a job trains: the model's, and an ELECTRA generator's (pre-training)."""
    o = cfg.get("objective")
    params = parameter_count(model_cfg, mlm_head=o is not None)
    if o is not None and o.name == "electra":
        params += parameter_count(generator_config(model_cfg, o.generator_fraction), mlm_head=True)
    return params


def host_mib(train_mib: int, params: int, on_gpu: bool, workers: int, tasks: int = 1) -> int:
    """A job's estimated host memory on one node (MiB), with ``HOST_MARGIN``: per task (process), the
    process's base, its ``workers`` loader processes and the model's state as a checkpoint copies it
    off the card; on the CPU, training's own peak (``train_mib``, an estimate made for a card: its
    CUDA overhead taken off) instead of the copy. Measured against the CPU (one invocation, 2-core AMD
    EPYC): ConvBERT-small, ELECTRA, batch 128 x 128, fp32, two loader workers: 8.3 GiB PSS at its peak,
    estimated 8.5 GiB before the margin."""
    base = HOST_BASE_MIB + workers * LOADER_MIB
    work = state_mib(params) if on_gpu else max(0, train_mib - OVERHEAD_MIB)
    return math.ceil((base + work) * max(1, tasks) * HOST_MARGIN)
