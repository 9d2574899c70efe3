"""The autoscale scenario's pure parts (tools/bench/autoscale.py): the HPA's replica
calculation as Kubernetes documents it, the oracle, the load schedule, the signals read from
two scrapes, and its plot. The scenario itself runs processes for minutes: not here."""
from __future__ import annotations

import math

from tools.bench import autoscale, report
from tools.bench.autoscale import DOWN_WINDOW_S, MAX_REPLICAS, Clock, Hpa, Reading


def test_within_the_tolerance_nothing_changes():
    hpa = Hpa(target=0.7)
    assert hpa.desired(0, ready=4, spec=4, metric=0.7 * 1.09) == 4
    assert hpa.desired(15, ready=4, spec=4, metric=0.7 * 0.91) == 4


def test_scale_up_is_ceil_of_ready_times_the_ratio_and_at_once():
    hpa = Hpa(target=0.7)
    assert hpa.desired(0, ready=2, spec=2, metric=1.05) == math.ceil(2 * 1.05 / 0.7)  # 3


def test_scale_up_is_limited_to_double_or_plus_four_per_period():
    hpa = Hpa(target=0.7)
    assert hpa.desired(0, ready=1, spec=1, metric=7.0) == 5  # 1 + 4, not 10
    assert hpa.desired(15, ready=5, spec=5, metric=7.0) == MAX_REPLICAS


def test_scale_down_waits_for_the_highest_recommendation_of_its_window():
    hpa = Hpa(target=0.7)
    assert hpa.desired(0, ready=4, spec=4, metric=0.7) == 4
    assert hpa.desired(15, ready=4, spec=4, metric=0.1) == 4  # 4 was recommended within the window
    assert hpa.desired(DOWN_WINDOW_S + 1, ready=4, spec=4, metric=0.1) == 1


def test_a_missing_metric_keeps_the_scale():
    assert Hpa(target=1.0).desired(0, ready=3, spec=3, metric=None) == 3


def test_the_schedule_ramps_from_a_third_to_three_times_and_back():
    assert autoscale.offered_x(0) == 0.3
    assert autoscale.offered_x(12) == 3.0
    assert autoscale.offered_x(autoscale.schedule_minutes() - 0.01) == 0.3
    assert max(autoscale.offered_x(m / 10) for m in range(300)) == 3.0


def test_the_oracle_is_ready_for_the_load_a_start_delay_ahead():
    at_peak = autoscale.oracle_desired(13 * 60, capacity=200)
    assert at_peak == math.ceil(3.0 / autoscale.LOAD_TARGET)
    ahead = autoscale.oracle_desired(12 * 60 - autoscale.START_DELAY_S, capacity=200)
    assert ahead == at_peak  # started then, ready when the peak comes


def test_queue_compute_ratio_is_mean_wait_per_request_over_mean_call():
    old = Reading(0, {"gateway_queue_wait_seconds_sum": 0, "gateway_queue_wait_seconds_count": 0,
                      "gateway_predictor_latency_seconds_sum": 0, "gateway_predictor_latency_seconds_count": 0}, 0, "")
    new = Reading(60, {"gateway_queue_wait_seconds_sum": 16 * 0.05, "gateway_queue_wait_seconds_count": 16,
                       "gateway_predictor_latency_seconds_sum": 0.1, "gateway_predictor_latency_seconds_count": 1}, 1.0, "")
    assert autoscale.queue_compute_ratio(new, old) == 0.05 / 0.1
    assert autoscale.cpu_utilisation(new, old, Clock(real_per_sim=0.1)) == 1.0 / 6 / 0.5


def test_the_plot_has_a_panel_per_signal(tmp_path):
    run = {"t_min": [0, 1, 2], "offered_x": [0.3, 1, 2], "ready": [1, 1, 2], "spec": [1, 2, 2],
           "period_t_min": [0, 1, 2], "goodput_pct": [100, 90, None]}
    results = {"machine": {"cores": 2, "python": "3.11"}, "scenarios": {"autoscale": {"plots": {"autoscale": {
        "capacity": 200, "minute_s": 4, "slo_ms": 250, "series": {"(a) cpu": run, "(c) load": run}}}}}}
    assert report.make_plots(results, tmp_path) == [str(tmp_path / "autoscale.png")]
