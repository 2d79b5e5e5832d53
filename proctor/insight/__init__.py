"""proctor.insight: read results back, find where a student is weak, aim new instances there.

`report` groups rollouts into cells (family x difficulty x declared parameters, per student) with a
pass rate, its Wilson interval and a verdict; `generate` writes instance specs aimed by a report;
`curriculum` closes the loop (run, report, generate, run again). See docs/insight.md."""

from .cells import Cell, Thresholds, Verdict, wilson_interval
from .report import Report, build_report

__all__ = ["Cell", "Report", "Thresholds", "Verdict", "build_report", "wilson_interval"]
