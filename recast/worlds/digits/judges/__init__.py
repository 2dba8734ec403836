"""Held-out judges, never used by training: attribute accuracies, defect rates, Fréchet distance, diversity, pairwise preference.

Everything here is fitted on the ``"judge"`` glyph split, which neither the base model nor the reward models see.
Fitting happens lazily on first use (cached), never at import.
"""

from recast.worlds.digits.judges.attributes import AttributeJudgement, JudgeReport, judge_attributes, judge_report
from recast.worlds.digits.judges.defects import DefectJudgement, DefectReport, defect_report, judge_defects
from recast.worlds.digits.judges.features import diversity, fid, frechet_distance, judge_features, precision_recall
from recast.worlds.digits.judges.preference import (VerdictBreakdown, WinRate, breakdown, prefer, quality_distance,
                                             win_rate)

__all__ = ["AttributeJudgement", "JudgeReport", "judge_attributes", "judge_report", "DefectJudgement", "DefectReport",
           "defect_report", "judge_defects", "diversity", "fid", "frechet_distance", "judge_features",
           "precision_recall", "VerdictBreakdown", "WinRate", "breakdown", "prefer", "quality_distance", "win_rate"]
