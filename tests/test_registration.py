"""The registration (docs/analysis_plan.md): every change since the git tag `registration-1` to the registry, the
rule or the plan is listed in docs/deviations.md."""

import ast
import subprocess

import pytest
import yaml

from conftest import ROOT

TAG = "registration-1"
RULE = {  # the registered definitions of each file: functions and constants of the rule
    "fraglib_study/audit/claims.py": (
        "ALPHA",
        "NEAR_CHANCE",
        "ORDERING_SE",
        "EDGE_Z",
        "TEXT",
        "TEST_IMAGES",
        "verdict",
        "table_difference",
        "stated",
        "paper_difference",
        "conflicts",
        "comparable",
        "paper_se",
        "paper_noise",
        "kind",
        "magnitude",
        "paired_analytic",
        "_dist",
        "_p_value",
        "on_edge",
        "training_variance",
        "aa_pairs",
        "study_noise",
        "chance_rsum",
        "skill",
        "_near_chance",
        "adjust",
    ),
    "fraglib/metrics/retrieval.py": ("holm", "stratified_mean_se"),
}
WHOLE = ("docs/analysis_plan.md", "fraglib_study/reference/published_results.yaml")
REGISTRY = "fraglib_study/reference/claims.yaml"
# where a registered file was at the tag, for those moved since (issue #78: the library and the study apart)
MOVED = {
    "fraglib_study/audit/claims.py": "fraglib/claims.py",
    "fraglib/metrics/retrieval.py": "fraglib/metrics.py",
    "fraglib_study/reference/claims.yaml": "fraglib/reference/claims.yaml",
    "fraglib_study/reference/published_results.yaml": "fraglib/reference/published_results.yaml",
}


def definitions(source: str, names: tuple[str, ...]) -> dict[str, str]:
    """name -> its source text (a module-level function, or the assignment of a constant); absent names left out."""
    tree, out = ast.parse(source), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            out[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in names:
                    out[t.id] = ast.get_source_segment(source, node)
    return out


def changes(old: dict[str, str | None], new: dict[str, str | None]) -> list[str]:
    """What differs between two versions of the registered files (path -> text; None: absent), each named as
    docs/deviations.md must name it: `path:definition`, `claims.yaml:<claim id>`, or `path`."""
    out = []
    every = tuple(n for names in RULE.values() for n in names)  # a definition moved between the rule's files, its
    a, b = ({}, {})  # text unchanged, is no change: each name is looked up in all of them
    for path in RULE:
        a.update(definitions(old[path] or "", every))
        b.update(definitions(new[path] or "", every))
    for path, names in RULE.items():
        out += [f"`{path}:{n}`" for n in names if a.get(n) != b.get(n)]
    ca, cb = (
        {c["id"]: c for c in (yaml.safe_load(t or "") or {}).get("claims", [])} for t in (old[REGISTRY], new[REGISTRY])
    )
    out += [f"`claims.yaml:{i}`" for i in sorted(set(ca) | set(cb)) if ca.get(i) != cb.get(i)]
    out += [f"`{p}`" for p in WHOLE if old[p] != new[p]]
    return out


def unlisted(found: list[str], deviations: str) -> list[str]:
    return [c for c in found if c not in deviations]


def _files() -> tuple[str, ...]:
    return (*RULE, REGISTRY, *WHOLE)


def registered() -> str | None:
    """The registration commit: the tag, else the commit docs/deviations.md names (a clone without tags still has
    the commit in main's history); None when neither is in this checkout."""
    import re

    named = re.search(r"commit ([0-9a-f]{40})", (ROOT / "docs" / "deviations.md").read_text())
    for ref in (f"refs/tags/{TAG}^{{commit}}", named and f"{named.group(1)}^{{commit}}"):
        if ref:
            r = subprocess.run(["git", "rev-parse", "-q", "--verify", ref], cwd=ROOT, capture_output=True, text=True)
            if r.returncode == 0:
                return r.stdout.strip()
    return None


def _at(commit: str, path: str) -> str | None:
    r = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def test_every_change_since_the_registration_is_a_listed_deviation():
    commit = registered()
    if commit is None:
        pytest.skip(f"neither the tag {TAG} nor the commit docs/deviations.md names is in this checkout (no history)")
    old = {p: _at(commit, MOVED.get(p, p)) for p in _files()}
    new = {p: (ROOT / p).read_text() if (ROOT / p).exists() else None for p in _files()}
    assert all(old[p] is not None for p in _files()), f"a registered file is not at {TAG}"
    missing = unlisted(changes(old, new), (ROOT / "docs" / "deviations.md").read_text())
    assert not missing, f"changed since {TAG} but not listed in docs/deviations.md: {', '.join(missing)}"


def test_the_check_sees_a_changed_rule_claim_and_plan():
    old = {p: (ROOT / p).read_text() for p in _files()}
    new = dict(old)
    new["fraglib_study/audit/claims.py"] = old["fraglib_study/audit/claims.py"].replace(
        "NEAR_CHANCE = 0.2", "NEAR_CHANCE = 0.1"
    )
    claims = yaml.safe_load(old[REGISTRY])
    claims["claims"][0]["tasks"] = claims["claims"][0]["tasks"][:1]
    new[REGISTRY] = yaml.safe_dump(claims)
    new["docs/analysis_plan.md"] = old["docs/analysis_plan.md"] + "\nmore\n"
    first = claims["claims"][0]["id"]
    found = changes(old, new)
    assert found == ["`fraglib_study/audit/claims.py:NEAR_CHANCE`", f"`claims.yaml:{first}`", "`docs/analysis_plan.md`"]
    assert unlisted(found, f"| `claims.yaml:{first}` | … |") == [
        "`fraglib_study/audit/claims.py:NEAR_CHANCE`",
        "`docs/analysis_plan.md`",
    ]
    assert changes(old, old) == []
    every = tuple(n for names in RULE.values() for n in names)
    assert {n for path in RULE for n in definitions(old[path], every)} == set(every)  # each found in the rule's files
    # a definition moved to another of the rule's files with its text unchanged is no change; edited, it is one
    src = definitions(old["fraglib_study/audit/claims.py"], ("verdict",))["verdict"]
    moved = dict(old, **{"fraglib_study/audit/claims.py": old["fraglib_study/audit/claims.py"].replace(src, "")})
    moved["fraglib/metrics/retrieval.py"] = old["fraglib/metrics/retrieval.py"] + "\n\n" + src + "\n"
    assert changes(old, moved) == []
    moved["fraglib/metrics/retrieval.py"] = (
        old["fraglib/metrics/retrieval.py"] + "\n\n" + src.replace("return", "return  #", 1) + "\n"
    )
    assert changes(old, moved) == ["`fraglib_study/audit/claims.py:verdict`"]
