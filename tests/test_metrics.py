"""Rank metrics against hand-computed examples: ties, 6 sentences per image, no-fragment sentences."""

import numpy as np
import pytest

from fraglib.metrics.retrieval import (
    annotation_ranks,
    bootstrap_ci,
    evaluate_scores,
    hodosh_columns,
    random_scores,
    recall_table,
    search_ranks,
)

NEG = -np.inf


def test_hand_computed_ranks_with_uneven_sentences_and_ties():
    # 3 images; image 0 has 1 sentence, image 1 has 6 sentences, image 2 has 2 (one without fragments)
    si = np.array([0, 1, 1, 1, 1, 1, 1, 2, 2])
    S = np.array(
        [
            #  s0   s1   s2   s3   s4   s5   s6   s7   s8
            [0.9, 0.1, 0.2, 0.3, 0.95, 0.0, 0.0, 0.5, NEG],
            [0.2, 0.4, 0.8, 0.1, 0.1, 0.1, 0.1, 0.8, NEG],
            [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6, NEG],
        ]
    )
    # image 0: own s0 = 0.9; s4 = 0.95 ranks above -> rank 2
    # image 1: best own = s2 = 0.8; s7 ties at 0.8 (pessimistic) -> rank 2
    # image 2: best own = s7 = 0.6; nothing else >= 0.6 -> rank 1
    assert annotation_ranks(S, si).tolist() == [2, 2, 1]
    # search: s0 column [0.9, 0.2, 0.5] own img 0 -> 1; s1 [0.1,0.4,0.5] own 1 -> 2;
    # s2 [0.2,0.8,0.5] -> 1; s3 [0.3,0.1,0.5] own 1 -> 3; s4 [0.95,0.1,0.5] own 1 -> 3;
    # s5 [0,0.1,0.5] -> 2; s6 same -> 2; s7 [0.5,0.8,0.6] own 2 -> 2; s8 all -inf -> last (3)
    assert search_ranks(S, si).tolist() == [1, 2, 1, 3, 3, 2, 2, 2, 3]


def test_sentence_without_fragments_ranks_last_even_when_all_tie():
    si = np.array([0, 1])
    S = np.array([[NEG, 0.0], [NEG, 1.0]])
    assert search_ranks(S, si).tolist() == [2, 1]
    assert annotation_ranks(S, si).tolist() == [2, 1]  # image 0's only sentence is -inf: last of 2


def test_constant_scores_give_worst_ranks():
    si = np.repeat(np.arange(4), 5)
    S = np.zeros((4, 20))
    assert set(annotation_ranks(S, si)) == {16}  # 15 foreign sentences tie above + 1
    assert set(search_ranks(S, si)) == {4}


def test_chunking_does_not_change_ranks():
    rng = np.random.default_rng(0)
    si = rng.integers(0, 37, size=150)
    si[:37] = np.arange(37)
    S = rng.random((37, 150)).round(2)  # many ties
    assert annotation_ranks(S, si, chunk=5).tolist() == annotation_ranks(S, si, chunk=1000).tolist()
    assert search_ranks(S, si, chunk=3).tolist() == search_ranks(S, si, chunk=1000).tolist()


def test_recall_table_and_ci():
    r = np.array([1, 1, 2, 6, 11, 0])  # 0 = image without sentences, ignored
    t = recall_table(r)
    assert t == {"r1": 40.0, "r5": 60.0, "r10": 80.0, "median_rank": 2.0, "mean_rank": 4.2}
    ci = bootstrap_ci(r, n_boot=200, seed=0)
    assert ci["r1"][0] <= 40.0 <= ci["r1"][1] and ci["mean_rank"][0] >= 1


def test_hodosh_keeps_first_sentence_of_each_image():
    si = np.array([1, 0, 0, 1, 2])
    sentids = np.array([10, 3, 1, 7, 9])
    assert hodosh_columns(si, sentids).tolist() == [2, 3, 4]


def test_random_baseline_matches_chance():
    n_img, per = 100, 5
    si = np.repeat(np.arange(n_img), per)
    res = evaluate_scores(random_scores(n_img, n_img * per, seed=1), si, n_boot=50)
    # search: the own image is uniform among 100 -> R@10 ~ 10%, mean rank ~ 50.5
    assert 7 < res["search"]["r10"] < 13 and 45 < res["search"]["mean_rank"] < 56
    assert len(res["ranks"]["search"]) == n_img * per


def test_similarity_ranks_by_hand():
    """Each sentence ranks the *other* sentences; rank of the best one of its own image."""
    from fraglib.metrics.retrieval import similarity_ranks

    si = np.array([0, 0, 1, 1, 2])
    sim = np.array(
        [
            [9.0, 1.0, 3.0, 2.0, 0.0],  # s0: own-image s1 scores 1, beaten by s2 (3), s3 (2) -> rank 3
            [5.0, 9.0, 1.0, 2.0, 2.0],  # s1: s0 scores 5, best overall -> rank 1
            [1.0, 1.0, 9.0, 1.0, 1.0],  # s2: s3 ties with s0, s1, s4 at 1 -> pessimistic rank 4
            [0.0, 0.0, 7.0, 9.0, 8.0],  # s3: s2 scores 7, s4 (8) above -> rank 2
            [1.0, 1.0, 1.0, 1.0, 9.0],
        ]
    )  # s4: its image has no other sentence -> 0 (excluded)
    assert similarity_ranks(sim, si).tolist() == [3, 1, 4, 2, 0]
    assert similarity_ranks(sim, si, chunk=2).tolist() == [3, 1, 4, 2, 0]


def test_random_ranks_match_the_expected_best_rank():
    """A uniform random ranking puts the best of k positives among N candidates at (N+1)/(k+1) on
    average (SYSTEMS A7.1): sentence similarity 100.0, image search 50.5, describing images 83.5 on
    a Pascal1K-sized test split (100 images x 5 sentences)."""
    from fraglib.metrics.retrieval import annotation_ranks, search_ranks, similarity_ranks

    si = np.repeat(np.arange(100), 5)
    rng = np.random.default_rng(0)
    sims, anns, srch = [], [], []
    for _ in range(40):
        s = rng.random((500, 500))
        sims.append(similarity_ranks(s, si).mean())
        scores = rng.random((100, 500))
        anns.append(annotation_ranks(scores, si).mean())
        srch.append(search_ranks(scores, si).mean())
    assert np.mean(sims) == pytest.approx(500 / 5, rel=0.02)
    assert np.mean(srch) == pytest.approx(101 / 2, rel=0.02)
    assert np.mean(anns) == pytest.approx(501 / 6, rel=0.03)


def test_fold_protocol_ranks_each_fold_against_its_own_images():
    """Two folds of two images; hand-computed ranks. Fold 0: images 0, 1 with sentences 0, 1 (and 2 of
    image 1); fold 1: images 2, 3 with sentences 3, 4. A strong competitor in the other fold is ignored."""
    from fraglib.metrics.retrieval import fold_metrics

    si = np.array([0, 1, 1, 2, 3])
    S = np.array(
        [
            [5.0, 1.0, 0.0, 9.0, 9.0],  # image 0: own sentence 0 first in its fold (fold 1's 9s do not count)
            [6.0, 2.0, 3.0, 0.0, 0.0],  # image 1: best own (3.0) behind sentence 0 (6.0) -> rank 2
            [9.0, 9.0, 9.0, 1.0, 2.0],  # image 2: own sentence 3 (1.0) behind sentence 4 -> rank 2
            [0.0, 0.0, 0.0, 0.0, 4.0],
        ]
    )  # image 3: own sentence 4 first
    m = fold_metrics(S, si, folds=2)
    # fold 0 annotation ranks [1, 2]; search: s0 -> image 0 (5 < 6: rank 2), s1 -> 1 (2 > 1), s2 -> 1
    # fold 1 annotation ranks [2, 1]; search: s3 -> image 2 (1 vs 0: rank 1), s4 -> image 3 (4 vs 2: rank 1)
    assert m["per_fold"][0]["annotation"]["r1"] == 50.0 and m["per_fold"][1]["annotation"]["r1"] == 50.0
    assert m["per_fold"][0]["search"]["r1"] == pytest.approx(200 / 3) and m["per_fold"][1]["search"]["r1"] == 100.0
    assert m["search"]["r1"] == pytest.approx((200 / 3 + 100) / 2) and m["annotation"]["mean_rank"] == 1.5
    assert m["folds"] == 2 and m["fold_images"] == 2
    with pytest.raises(ValueError, match="3 equal folds"):
        fold_metrics(S, si, folds=3)


def test_holm_equals_the_step_down_procedure_written_as_a_loop():
    """fraglib.metrics.retrieval.holm against Holm (1979) as a loop: sort, multiply the j-th smallest by m − j + 1, carry
    the running maximum, cap at 1, back to the input order; ties and one-element families included."""
    from fraglib.metrics.retrieval import holm

    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 17):
        p = np.round(rng.random(m) ** 3, 3)  # rounding makes ties
        order = sorted(range(m), key=lambda i: p[i])
        ref, running = np.empty(m), 0.0
        for j, i in enumerate(order):
            running = max(running, min(1.0, (m - j) * p[i]))
            ref[i] = running
        np.testing.assert_allclose(holm(p), ref)
    with pytest.raises(ValueError, match="p-values"):
        holm([0.2, 1.5])


def test_stratified_mean_se_by_hand():
    from fraglib.metrics.retrieval import stratified_mean_se

    d = np.array([1.0, 3.0, 2.0, 2.0, 8.0])
    mean, se = stratified_mean_se(d, [0, 0, 1, 1, 1])
    # SE² = (2/5)² · var([1, 3]) / 2 + (3/5)² · var([2, 2, 8]) / 3, var with n − 1
    assert mean == pytest.approx(3.2) and se == pytest.approx(np.sqrt(0.16 * 2.0 / 2 + 0.36 * 12.0 / 3))
    assert stratified_mean_se(d)[1] == pytest.approx(d.std(ddof=1) / np.sqrt(5))
    with pytest.raises(ValueError, match="stratum 1 holds 1 query"):
        stratified_mean_se(d, [0, 0, 0, 0, 1])
