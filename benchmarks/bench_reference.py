"""CPU reference GEMM at the seed README's 4096^3 throughput shape (`nox -s bench`)."""

from __future__ import annotations

import pytest

from f4pipe.core.layout import SEED_A, SEED_B
from f4pipe.host.operands import generate_operand
from f4pipe.host.reference import reference_gemm


@pytest.fixture(scope="module")
def operands_4096():
    return generate_operand(4096, 4096, SEED_A), generate_operand(4096, 4096, SEED_B)


def test_reference_4096_cubed(benchmark, operands_4096):
    a, b = operands_4096
    ref = benchmark.pedantic(reference_gemm, args=(a, b), rounds=3, iterations=1)
    assert ref.shape == (4096, 4096)


def test_generate_operand_4096(benchmark):
    op = benchmark.pedantic(generate_operand, args=(4096, 4096, SEED_A), rounds=3, iterations=1)
    assert op.packed.shape == (4096, 2048)
