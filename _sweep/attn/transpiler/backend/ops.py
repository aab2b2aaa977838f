"""The ATen operators the fusion pass may put in a generated kernel, as data: each maps to a
`.tile` expression template over its operands (already loaded, floats in f32)."""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

# target -> template; {0}, {1}, {2}: the operands (tile expressions or literals).
ELEMENTWISE = {
    aten.add.Tensor: "({0} + {1})", aten.add.Scalar: "({0} + {1})",
    aten.sub.Tensor: "({0} - {1})", aten.sub.Scalar: "({0} - {1})",
    aten.rsub.Scalar: "({1} - {0})", aten.rsub.Tensor: "({1} - {0})",
    aten.mul.Tensor: "({0} * {1})", aten.mul.Scalar: "({0} * {1})",
    aten.div.Tensor: "({0} / {1})", aten.div.Scalar: "({0} / {1})",
    aten.neg.default: "(-{0})",
    aten.exp.default: "exp({0})", aten.log.default: "log({0})",
    aten.sqrt.default: "sqrt({0})", aten.rsqrt.default: "rsqrt({0})",
    aten.tanh.default: "tanh({0})", aten.sigmoid.default: "sigmoid({0})",
    aten.silu.default: "silu({0})", aten.sin.default: "sin({0})", aten.cos.default: "cos({0})",
    aten.erf.default: "erf({0})", aten.abs.default: "abs({0})",
    aten.reciprocal.default: "(1.0 / {0})",
    aten.relu.default: "max({0}, 0.0)",
    aten.maximum.default: "max({0}, {1})", aten.minimum.default: "min({0}, {1})",
    aten.where.self: "where({0}, {1}, {2})",
    aten.eq.Tensor: "({0} == {1})", aten.eq.Scalar: "({0} == {1})",
    aten.ne.Tensor: "({0} != {1})", aten.ne.Scalar: "({0} != {1})",
    aten.lt.Tensor: "({0} < {1})", aten.lt.Scalar: "({0} < {1})",
    aten.le.Tensor: "({0} <= {1})", aten.le.Scalar: "({0} <= {1})",
    aten.gt.Tensor: "({0} > {1})", aten.gt.Scalar: "({0} > {1})",
    aten.ge.Tensor: "({0} >= {1})", aten.ge.Scalar: "({0} >= {1})",
    aten.bitwise_and.Tensor: "({0} & {1})", aten.bitwise_or.Tensor: "({0} | {1})",
    aten.logical_not.default: "(not {0})",
}

# Casts: the value is rounded to the target dtype (narrow floats then widened back to f32).
CASTS = {aten._to_copy.default, torch.ops.prims.convert_element_type.default}

# Row reductions over the last dimension (keepdim=True only): target -> (tile reduction, pad value).
REDUCTIONS = {
    aten.sum.dim_IntList: ("sum", "0.0"),
    aten.mean.dim: ("mean", "0.0"),
    aten.amax.default: ("max", "-inf"),
}

# torch dtype -> tilex dtype name; the dtypes a generated kernel can load and store.
DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
          torch.int64: "i64", torch.bool: "bool"}
FLOAT_DTYPES = {torch.float32, torch.float16, torch.bfloat16}


def literal(v) -> str:
    """A Python scalar as a `.tile` literal."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        text = repr(v)
        return text if ("." in text or "e" in text) else text + ".0"
    raise TypeError(f"not a scalar literal: {v!r}")


def pow_template(exponent) -> str | None:
    """aten.pow.Tensor_Scalar(x, e) as a template, for the exponents worth spelling out."""
    table = {2: "({0} * {0})", 2.0: "({0} * {0})", 1: "{0}", 1.0: "{0}", 0.5: "sqrt({0})",
             -0.5: "rsqrt({0})", -1: "(1.0 / {0})", -1.0: "(1.0 / {0})", 3: "({0} * {0} * {0})"}
    if exponent in table:
        return table[exponent]
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        return "({0} ** " + literal(float(exponent)) + ")"
    return None


def gelu_template(approximate: str) -> str:
    return "gelu_tanh({0})" if approximate == "tanh" else "gelu({0})"
