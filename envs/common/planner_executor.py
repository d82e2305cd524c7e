"""The planner/executor team shared by ALFWorld and KeyChest (docs/drmas.md): a planner that sets
subgoals and an executor that plays the game, as a :class:`~envs.common.team_env.TeamTextEnv` (the
team contract); their tag rules, prompts and expert play.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from envs.common.actions import ParsedAction, parse_action, parse_tagged, tag_text
from envs.common.prompts import PromptContext, shown_subgoal
from envs.common.team_env import RoleTurn, TeamTextEnv, check_role, role_prompt

PLANNER = "planner"
EXECUTOR = "executor"
#: The executor's report words: hand the turn back to the planner after this action.
REPORTS = ("done", "failed")


def parse_executor(output: str, *, require_think: bool) -> tuple[ParsedAction, str | None]:
    """The executor's ``<action>`` (think-action rule) and its optional ``<report>`` word (None when
    absent). A report other than :data:`REPORTS` makes the output invalid."""
    report = tag_text(output, "report")
    if report is None:
        return parse_action(output, require_tags=require_think), None
    lowered = output.lower()
    start = lowered.find("<report>")
    end = lowered.find("</report>", start) + len("</report>")
    parsed = parse_action(output[:start] + output[end:], require_tags=require_think)
    if report not in REPORTS:
        return ParsedAction(parsed.command, False), report
    return parsed, report


class PlannerExecutorTeam(TeamTextEnv):
    """A planner that sets subgoals and an executor that plays the game (ALFWorld, KeyChest).

    The planner acts first and whenever the executor's subgoal is over: after an executor answer that
    ends with ``<report>done</report>`` or ``<report>failed</report>`` (its action runs first), and
    after ``replan_every`` executor turns on one subgoal. It answers
    ``<think>...</think><subgoal>...</subgoal>``; an invalid answer keeps the subgoal in force and
    the executor goes on (as Dr. MAS's unparseable verdict lets its team go on, docs/drmas.md). The
    executor answers ``<think>...</think><action>command</action>`` and alone steps the game. Both
    need the think tags when the game's ``require_tags`` does (KeyChest's bare commands stay valid).
    ``info`` adds ``subgoal`` (the subgoal in force, None before the first valid one) and ``report``
    (the executor's report on its latest turn, None without one).
    """

    ROLES = (PLANNER, EXECUTOR)

    def __init__(self, *, max_turns: int | None = None, replan_every: int = 5, **game_settings: Any):
        type(self).check_settings(replan_every=replan_every)
        super().__init__(max_turns=max_turns, **game_settings)
        self.replan_every = replan_every
        self.subgoal: str | None = None
        self._report: str | None = None
        self._subgoal_turns = 0

    @classmethod
    def check_settings(cls, *, replan_every: int = 5, **common: Any) -> None:
        super().check_settings(**common)
        if not isinstance(replan_every, int) or isinstance(replan_every, bool) or replan_every < 1:
            raise ValueError(f"replan_every must be a positive int, got {replan_every!r}")

    @abstractmethod
    def _expert_phase(self, plan: Sequence[str]) -> tuple[str, str]:
        """The expert's current phase for its remaining ``plan``: (the subgoal, the command that
        completes it)."""

    def _start_episode(self) -> None:
        self.subgoal = None
        self._report = None
        self._subgoal_turns = 0

    def _first_role(self) -> str:
        return PLANNER

    def _parse(self, role: str, output: str) -> RoleTurn:
        require_think = self.game.require_tags
        if role == PLANNER:
            parsed = parse_tagged(output, "subgoal", require_think=require_think)
            return RoleTurn(parsed.command, parsed.is_valid)
        parsed, report = parse_executor(output, require_think=require_think)
        if not parsed.is_valid:
            return RoleTurn(parsed.command, False)
        return RoleTurn(parsed.command, True, game_command=parsed.command, note=report)

    def _next_role(self, role: str, turn: RoleTurn) -> str:
        if role == PLANNER:
            if turn.is_valid:
                self.subgoal = turn.command
            self._subgoal_turns = 0
            return EXECUTOR
        self._report = turn.note
        self._subgoal_turns += 1
        return PLANNER if turn.note is not None or self._subgoal_turns >= self.replan_every else EXECUTOR

    def _admissible(self, role: str) -> list[str]:
        return list(self._game_info.get("admissible_actions", [])) if role == EXECUTOR else []

    def _role_info(self, role: str) -> dict[str, Any]:
        return {"subgoal": self.subgoal, "report": self._report}

    def expert_action(self, role: str) -> str:
        plan = self.game.expert_plan()
        if not plan:
            raise RuntimeError("the expert has nothing left to do (the episode is over)")
        subgoal, completing = self._expert_phase(plan)
        if role == PLANNER:
            return f"<think>The next part of the task: {subgoal}.</think><subgoal>{subgoal}</subgoal>"
        command = plan[0]
        report = "<report>done</report>" if command == completing else ""
        return f"<think>This step serves the subgoal.</think><action>{command}</action>{report}"


# --------------------------------------------------------------------------- prompts
PLANNER_ANSWER = (
    "The current subgoal is: {subgoal}\n"
    "Think step by step inside <think> </think> tags, then give the executor its next subgoal inside "
    "<subgoal> </subgoal> tags: one short part of the task that a few actions can reach."
)
EXECUTOR_ANSWER = (
    "Your current subgoal is: {subgoal}\n"
    "Think step by step inside <think> </think> tags, then give your next action inside <action> "
    "</action> tags. If this action completes the subgoal, end your answer with <report>done</report>; "
    "if the subgoal cannot be reached, end it with <report>failed</report>."
)


def planner_executor_prompt(context: PromptContext, game: str, show: Callable[[str], str] = str) -> str:
    """The planner's or the executor's prompt (by ``context.role``) in a team playing ``game``."""
    intros = {
        PLANNER: f"You are the planner of a two-agent team in {game}. You set subgoals; the executor acts.",
        EXECUTOR: f"You are the executor of a two-agent team in {game}. You act for the planner's subgoal.",
    }
    answers = {PLANNER: PLANNER_ANSWER, EXECUTOR: EXECUTOR_ANSWER}
    role = check_role(context, PlannerExecutorTeam.ROLES)
    answer = answers[role].format(subgoal=shown_subgoal(context))
    return role_prompt(context, intro=intros[role], answer=answer, show=show)
