"""LaTeX tables (`convexp report --format latex`): every special character of text mode is escaped."""

from convexp.report.tables import Cell, Row, to_latex


def test_latex_table_escapes_every_special_character():
    label = r"R&D 50% $5 #1 a_b {x} ~y ^z \w ±"
    row = Row(variant="v", label=label, ours={"sst2": Cell(91.5, n=1)}, paper={"sst2": 92.0})
    tex = to_latex([row], ["sst2"], title="conv_type & kernel_size: 100% {9} #runs")
    line = next(l for l in tex.splitlines() if l.startswith("R"))
    escaped = (
        r"R\&D 50\% \$5 \#1 a\_b \{x\} \textasciitilde{}y \textasciicircum{}z \textbackslash{}w $\pm$"
    )
    assert line.split(" & ours & ")[0] == escaped
    assert r"\caption{conv\_type \& kernel\_size: 100\% \{9\} \#runs}" in tex
    # the table's own markup is untouched: one column separator per cell
    assert line.count(" & ") == 2
