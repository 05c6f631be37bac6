"""Offline simulator of stream groupings: streams, sources fed by shuffle, workers with a queue model.

``simulate(stream, SimulationConfig(...)) -> dict`` (see :mod:`evaluation.simulator.engine`); streams in
:mod:`evaluation.simulator.streams`.
"""

from evaluation.simulator.config import SimulationConfig
from evaluation.simulator.engine import simulate, weighted_percentiles
from evaluation.simulator.streams import (
                                          ArrayStream,
                                          DriftingStream,
                                          FileStream,
                                          SkewedStream,
                                          Stream,
                                          ZipfStream,
                                          zipf_exponent_for_top_share,
                                          zipf_probabilities,
)

__all__ = ["SimulationConfig", "simulate", "weighted_percentiles", "Stream", "ZipfStream", "SkewedStream",
           "DriftingStream", "FileStream", "ArrayStream", "zipf_probabilities", "zipf_exponent_for_top_share"]
