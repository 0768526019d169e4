"""Text that tc.ir.parse must refuse: an IRParseError naming the line:column, what was
found and what was expected; never another exception, never a crash."""
import random

import pytest

import tecomp as tc
from tecomp.ir import parse
from tecomp.ir.parse import MAX_DEPTH

GOOD = """primfn main(A: float32[8], B: float32[8]) {
  for (i, 0, 8) {
    B[i] = A[i]*2f
  }
}"""


def refuse(text, match):
    with pytest.raises(tc.IRParseError, match=match):
        parse(text)


def test_not_text():
    refuse(b"primfn", r"takes the printed IR as a str, got a bytes")


def test_empty():
    refuse("\n  \n", r"the text is empty: expected a function, `primfn name\(...\) \{`")


def test_not_a_function():
    refuse("for (i, 0, 8) {\n}", r"line 1:1: expected `primfn` \(a function begins")


def test_a_constant_of_the_wrong_dtype():
    refuse(GOOD.replace("2f", "2"), r"line 3:16: the operands of `\*` are float32 and int32; "
                                    r"the IR does not convert implicitly: write a cast, "
                                    r"float32\(...\) \(a float32 constant is written with its "
                                    r"suffix: 1f\)")


def test_a_store_of_the_wrong_dtype():
    refuse(GOOD.replace("A[i]*2f", "float64(A[i])"),
           r"line 3:5: the value stored into B is float64, the buffer float32: convert it")


def test_an_unknown_variable():
    refuse(GOOD.replace("A[i]*2f", "A[j]*2f"), r"line 3:14: unknown name 'j': a variable must "
                                               r"be a parameter")


def test_an_unknown_buffer():
    refuse(GOOD.replace("A[i]*2f", "X[i]*2f"), r"line 3:12: unknown buffer 'X'")


def test_the_wrong_number_of_indices():
    refuse(GOOD.replace("A[i]*2f", "A[i, 0]*2f"),
           r"line 3:12: A has 1 dimension\(s\), indexed with 2")


def test_a_block_not_closed():
    refuse(GOOD[:GOOD.rindex("}")], r"line 1:\d+: this `\{` is not closed: expected `\}`")


def test_text_after_the_function():
    refuse(GOOD + "\nB[0] = 1f", r"line 6:1: text after the end of function main")


def test_a_number_with_an_unknown_suffix():
    refuse(GOOD.replace("2f", "2q"), r"line 3:17: unexpected '2q': a number takes one of the "
                                     r"suffixes f, h, bf, i64")


def test_an_integer_out_of_range():
    refuse(GOOD.replace("A[i]*2f", "A[i + 300i8]*2f"), r"300i8 is out of range for int8")


def test_an_unexpected_character():
    refuse(GOOD.replace("*2f", "*2f;"), r"line 3:19: unexpected character ';'")


def test_a_condition_that_is_not_bool():
    refuse(GOOD.replace("B[i] = A[i]*2f", "if (i) {\n B[i] = 1f\n }"),
           r"line 3:9: the if's condition is int32, not bool: compare it \(`i != 0`\)")


def test_a_loop_variable_bound_twice():
    refuse(GOOD.replace("B[i] = A[i]*2f", "for (i, 0, 2) {\n }"),
           r"line 3:10: i is already bound here \(a parameter, an enclosing loop or a let\)")


def test_an_unknown_statement():
    refuse(GOOD.replace("for (i", "fro (i"), r"line 2:3: unknown statement 'fro': a line is a "
                                             r"loop \(for, parallel, vectorized, unrolled or "
                                             r"a thread tag: blockIdx.x")
    refuse(GOOD.replace("B[i] = A[i]*2f", "A[i]*2f"), r"line 3:9: expected `=` \(a store is")
    refuse(GOOD.replace("B[i] = A[i]*2f", "i + 1"), r"line 3:5: expected a statement")


def test_a_tensorize_block_of_an_intrinsic_nobody_declared():
    refuse(GOOD.replace("B[i] = A[i]*2f", "tensorize my.intrin (store) {\n  // out c: B[x0]"
                                          "\n }"),
           r"line 3:15: no tensor intrinsic 'my.intrin' with the operands c was declared in "
           r"this process: a tensorize block is read back only where tc.decl_tensor_intrin "
           r"declared its intrinsic")


def test_a_codegen_plan():
    refuse(GOOD.replace("  for (i", "  // attr vector_plan = widen 16 lanes\n  for (i"),
           r"line 2:11: the attribute vector_plan is a decision of the codegen phase, which "
           r"tc.build makes again: parse the IR of tc.lower")


def test_an_extern_call_nobody_declared():
    refuse(GOOD.replace("B[i] = A[i]*2f", "call_extern nobody.knows(A, B)"),
           r"line 3:17: no extern function 'nobody.knows' taking \(buffer, buffer\) was "
           r"declared in this process")


def test_an_unknown_scope():
    refuse(GOOD.replace("  for (i", "  allocate T: float32[4] (texture)\n  for (i"),
           r"line 2:27: unknown scope 'texture': use one of global, local, shared")


def test_a_bad_escape():
    refuse(GOOD.replace("B[i] =", "B<U+12>[i] ="), r"line 3:6: unexpected '<U\+12>\[i': a `<U\+XXXX>` escape needs 4 to 6 "
                                        r"upper-case hex digits")


def test_a_deeply_nested_expression_is_bounded():
    depth = MAX_DEPTH + 5
    text = GOOD.replace("A[i]*2f", "(" * depth + "A[i]" + ")" * depth + "*2f")
    refuse(text, r"line 3:\d+: the text nests deeper than 20000 levels")


def test_deeply_nested_loops_are_bounded():
    depth = MAX_DEPTH + 5
    lines = ["primfn main(A: float32[8]) {"]
    lines += [f"for (i{k}, 0, 1) {{" for k in range(depth)]
    lines += ["}"] * (depth + 1)
    refuse("\n".join(lines), r"the text nests deeper than 20000 levels")


def test_mangled_text_raises_only_parse_errors():
    """Characters deleted, doubled or replaced at random in printed IR: the parser either
    reads it or raises IRParseError (never another exception)."""
    A = tc.placeholder((20, 16), name="A", dtype="float16")
    B = tc.compute((20, 16), lambda i, j: tc.if_then_else(
        i > 2, A[i, j].astype("float32") * 0.5, tc.exp(A[i + 1, j].astype("float32"))),
        name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].vectorize(ji)
    s[B].parallel(B.op.axis[0])
    text = str(tc.lower(s, [A, B]))
    rng = random.Random(0)
    alphabet = "()[]{},:=+-*/%<>!&|. \n'\"0123456789fhiuxyzAB_U#"
    for _ in range(400):
        t = list(text)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(t))
            how = rng.randrange(3)
            if how == 0:
                del t[k]
            elif how == 1:
                t.insert(k, t[k])
            else:
                t[k] = rng.choice(alphabet)
        try:
            parse("".join(t))
        except tc.IRParseError:
            pass


def test_text_built_for_a_gpu_needs_checks_false():
    text = GOOD.replace("for (i", "threadIdx.x (i")
    with pytest.raises(tc.BuildError, match=r"main was read from text \(tc.ir.parse\), whose "
                                            r"indices tecomp does not check on GPU targets"):
        tc.build(parse(text), target="cuda-emu")
