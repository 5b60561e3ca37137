"""Recording real rollouts: a shipped, seeded prompt set of graded math word problems and a
recorder that runs prompt groups on live servers and writes a length trace with token ids."""

from tailsieve.record.math_problems import (
    MathProblem,
    check_answer,
    extract_answer,
    generate,
    write_problems,
)

__all__ = ["MathProblem", "check_answer", "extract_answer", "generate", "write_problems"]
