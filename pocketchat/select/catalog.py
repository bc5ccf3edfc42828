"""The POCKET builds (facts from shared/pocket-builds.md) as plain data.

Sizes are the model card's, in decimal GB. Entries marked `verified=False` have a file name or
size that no public copy confirmed: the store resolves the real ones from the Hub's listing when
online, and these numbers are the offline fallback.

Quality is a 0-100 score per language, used only to rank builds that fit:
- ko: 100 x (Q4_K_M perplexity 5.79) / (the build's Korean perplexity), from the card.
- en: the card gives no English perplexity. IQ1_M hurts Korean about 2.8x more than English,
  so its English loss is the Korean loss / 2.8; Q2_K is "88% of full quality" (GPQA ratio);
  the EN-pruned mixes sit below IQ1_M ("much closer to full quality" is said of PC-mix only
  relative to the phone build). A build scored 0 for a language is not offered for it.
"""

from __future__ import annotations

from pocketchat.errors import ModelNotFound
from pocketchat.types import GB, Build

ACTIVE_PARAMS = 3.0e9
TOTAL_PARAMS = 34.66e9
# Routed experts are ~94% of the weights: non-expert N and routed R satisfy N + R = 34.66B and
# N + R * 8/256 = 3B (8 of 256 experts active per token), so R = 32.7B and N = 2.0B.
EXPERT_FRACTION = 0.943


def _pruned_params(kept: int) -> float:
    return TOTAL_PARAMS * ((1 - EXPERT_FRACTION) + EXPERT_FRACTION * kept / 256)


def _pruned_fraction(kept: int) -> float:
    non_expert = TOTAL_PARAMS * (1 - EXPERT_FRACTION)
    return 1 - non_expert / _pruned_params(kept)


GGUF_REPO = "FINAL-Bench/POCKET-35B-GGUF"
KR_REPO = "FINAL-Bench/POCKET-KR-GGUF"
KR_MLX_REPO = "FINAL-Bench/POCKET-KR-MLX"
EN_REPO = "FINAL-Bench/POCKET-EN-GGUF"

_BUILDS: tuple[Build, ...] = (
    Build(
        id="POCKET-35B-Q4_K_M", repo_id=GGUF_REPO, filename="POCKET-35B-Q4_K_M.gguf",
        quant="Q4_K_M", format="gguf", size_bytes=int(21.2 * GB), bits_per_weight=4.5,
        quality={"en": 100.0, "ko": 100.0},
        description="best quality; a PC with 32 GB RAM",
    ),
    Build(
        id="POCKET-35B-Q3_K_M", repo_id=GGUF_REPO, filename="POCKET-35B-Q3_K_M.gguf",
        quant="Q3_K_M", format="gguf", size_bytes=int(16.8 * GB), bits_per_weight=3.4,
        quality={"en": 96.0, "ko": 95.5},
        description="a PC with 24 GB",
    ),
    Build(
        id="POCKET-35B-Q2_K", repo_id=GGUF_REPO, filename="POCKET-35B-Q2_K.gguf",
        quant="Q2_K", format="gguf", size_bytes=int(12.9 * GB), bits_per_weight=2.6,
        quality={"en": 88.0, "ko": 89.2},
        description="the daily driver for a 16-24 GB mini-PC with no GPU, 88% of full quality",
    ),
    Build(
        id="POCKET-35B-IQ1_M", repo_id=GGUF_REPO, filename="POCKET-35B-IQ1_M.gguf",
        quant="IQ1_M", format="gguf", size_bytes=int(8.24 * GB), bits_per_weight=1.9,
        quality={"en": 79.0, "ko": 59.8},
        description="any 16 GB box; weak in Korean",
    ),
    Build(
        id="POCKET-KR-IQ2_M", repo_id=KR_REPO, filename="POCKET-KR-IQ2_M.gguf",
        quant="IQ2_M", format="gguf", size_bytes=int(5.1 * GB), bits_per_weight=2.7,
        language="ko", quality={"en": 0.0, "ko": 72.8},
        total_params=_pruned_params(96), expert_fraction=_pruned_fraction(96), n_experts=96,
        description="Korean-pruned experts; Android 8 GB+", verified=False,
    ),
    Build(
        id="POCKET-KR-160-Q2_K", repo_id=KR_REPO, filename="POCKET-KR-160-Q2_K.gguf",
        quant="Q2_K", format="gguf",
        size_bytes=int(12.9 * GB * _pruned_params(160) / TOTAL_PARAMS), bits_per_weight=2.6,
        language="ko", quality={"en": 0.0, "ko": 86.0},
        total_params=_pruned_params(160), expert_fraction=_pruned_fraction(160), n_experts=160,
        description="Korean, 160 of 256 experts kept (size estimated)", verified=False,
    ),
    Build(
        id="POCKET-KR-MLX", repo_id=KR_MLX_REPO, filename=None,
        quant="MLX 2-bit", format="mlx", size_bytes=int(5.1 * GB), bits_per_weight=2.5,
        language="ko", quality={"en": 0.0, "ko": 72.8},
        total_params=_pruned_params(96), expert_fraction=_pruned_fraction(96), n_experts=96,
        description="native Metal build for iPhone / iPad / Mac, 96 Korean experts",
        verified=False,
    ),
    Build(
        id="POCKET-EN-iPhone-mix", repo_id=EN_REPO, filename="POCKET-EN-iPhone-mix.gguf",
        quant="mixed", format="gguf", size_bytes=int(5.3 * GB), bits_per_weight=2.6,
        language="en", quality={"en": 66.0, "ko": 0.0},
        total_params=_pruned_params(96), expert_fraction=_pruned_fraction(96), n_experts=96,
        description="English-pruned phone build (PocketPal)", verified=False,
    ),
    Build(
        id="POCKET-EN-PC-mix", repo_id=EN_REPO, filename="POCKET-EN-PC-mix.gguf",
        quant="mixed", format="gguf", size_bytes=int(6.8 * GB), bits_per_weight=3.0,
        language="en", quality={"en": 76.0, "ko": 0.0},
        total_params=_pruned_params(112), expert_fraction=_pruned_fraction(112), n_experts=112,
        description="English-pruned PC / Android build, closer to full quality than the phone build",
        verified=False,
    ),
)


def builds() -> tuple[Build, ...]:
    """Every POCKET build, best quality first."""
    return _BUILDS


def get(build_id: str) -> Build:
    """The build with this id (case-insensitive)."""
    for b in _BUILDS:
        if b.id.lower() == build_id.lower():
            return b
    raise ModelNotFound(
        f"no POCKET build named {build_id!r}",
        hint="Known builds: " + ", ".join(b.id for b in _BUILDS),
    )


def bytes_per_token(build: Build) -> float:
    """Weight bytes read to generate one token: the shared weights plus the active experts."""
    return build.size_bytes * build.active_params / build.total_params


def expert_bytes(build: Build) -> float:
    """Bytes of the routed-expert tensors (what `gpu+cpu-experts` keeps in RAM)."""
    return build.size_bytes * build.expert_fraction
