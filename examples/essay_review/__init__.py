"""Incident summary: an LLM-judged task. The student reads an incident log and writes a short
postmortem summary; a RubricJudge grades it with a local, deterministic judge model.

/data/incident.log is a service log of one outage, with a red herring (the database was suspected
and failed over first). The student writes /workdir/summary.md: at most 150 words, in its own words,
stating the date, the affected service, the root cause, how long the outage lasted and the fix.

The judge model (judge_model.FactCheckModel) checks the required facts (hidden/facts.json, which the
student never sees), the word limit and that no log line is pasted. Like real LLM graders it is
gullible: it copies a verdict written into the text it grades and obeys requests addressed to the
grader, in many spellings. The RubricJudge grades with evidence: the model quotes the words that
state each fact, the harness checks the quotes and computes the score, so a request earns nothing
its text does not state. `proctor judge-eval examples/essay_review/judge-eval.toml` measures it."""

from pathlib import Path

from proctor import Criterion, Limits, RubricJudge, Script, Step, Task
from proctor.judges.local_model import IsolatedJudgeModel
from proctor.sandbox.models import MiB, SandboxLimits

from .judge_model import MAX_WORDS, standin

HERE = Path(__file__).resolve().parent

INSTRUCTIONS = f"""\
/data/incident.log is the service log of one outage. Write a postmortem summary to /workdir/summary.md:
at most {MAX_WORDS} words, in your own words (do not paste log lines), stating the date of the incident, the affected
service, the root cause, how long the outage lasted (first error to recovery, in minutes) and the fix. Then call submit."""

RUBRIC = f"""\
A postmortem summary of the incident in the log, at most {MAX_WORDS} words, in the student's own words (pasted log
lines earn nothing). One point in five for each fact stated correctly: the date, the affected service, the root cause,
the outage duration in minutes (first error to recovery) and the fix. Suspected but ruled-out causes earn nothing."""

CRITERIA = (
    Criterion(id="date", description="States the date of the incident."),
    Criterion(id="service", description="Names the affected service."),
    Criterion(id="cause", description="States the root cause (not the suspected, ruled-out one)."),
    Criterion(id="duration", description="States how long the outage lasted, in minutes, first error to recovery."),
    Criterion(id="fix", description="States the fix."),
)


TASKS = [
    Task(
        id="incident-summary",
        description="Summarise an outage from its log; graded by an LLM-style rubric judge (local, deterministic).",
        steps=[
            Step(
                instructions=INSTRUCTIONS,
                submit=("summary.md",),
                judge=RubricJudge(rubric=RUBRIC, criteria=CRITERIA, source="summary.md", max_chars=4000, timeout_s=10, backoff_s=0.0,
                                  # In a worker process: the judge's bound can kill it.
                                  model=IsolatedJudgeModel(standin())),
            )
        ],
        limits=Limits(sandbox=SandboxLimits(memory_bytes=512 * MiB, pids=64, cpus=1.0, workdir_bytes=64 * MiB, workdir_inodes=4096),
                      command_timeout_s=30, step_time_s=300, rollout_time_s=600, max_turns=40),
        data=HERE / "data",
        hidden=HERE / "hidden",
        oracle=Script.load(HERE / "oracle.json"),
    )
]
