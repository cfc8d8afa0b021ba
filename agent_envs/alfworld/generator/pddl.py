"""Writing a scene as a PDDL problem over the alfred domain, with each task type's goal."""

from __future__ import annotations

from agent_envs.alfworld.generator.scenes import Scene
from agent_envs.alfworld.generator.vocabulary import Vocabulary

__all__ = ["GOALS", "problem_text"]


GOALS = {
    "pick_and_place_simple": """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o - object)
                (and
                    (inReceptacle ?o ?r)
                    (objectType ?o {obj}Type)
                    (receptacleType ?r {recep}Type)
                )
            )
        )
    )
)""",
    "pick_two_obj_and_place": """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o1 - object)
                (and
                    (objectType ?o1 {obj}Type)
                    (receptacleType ?r {recep}Type)
                    (inReceptacle ?o1 ?r)
                    (exists (?o2 - object)
                        (and
                            (not (= ?o1 ?o2))
                            (objectType ?o2 {obj}Type)
                            (receptacleType ?r {recep}Type)
                            (inReceptacle ?o2 ?r)
                        )
                    )
                )
            )
        )
    )
)""",
    "look_at_obj_in_light": """(:goal
    (and
        (exists (?ot - object
                 ?r - receptacle
                 ?a - agent
                 ?l - location)
            (and
                (objectType ?ot {recep}Type)
                (toggleable ?ot)
                (isToggled ?ot)
                (receptacleAtLocation ?r ?l)
                (atLocation ?a ?l)
                (inReceptacle ?ot ?r)
            )
        )
        (exists (?o - object
                 ?a - agent)
            (and
                (objectType ?o {obj}Type)
                (holds ?a ?o)
            )
        )
    )
)""",
}
_PROCESSED_GOAL = """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o - object)
                (and
                    ({able} ?o)
                    (objectType ?o {{obj}}Type)
                    (receptacleType ?r {{recep}}Type)
                    ({state} ?o)
                    (inReceptacle ?o ?r)
                )
            )
        )
    )
)"""
GOALS["pick_clean_then_place_in_recep"] = _PROCESSED_GOAL.format(able="cleanable", state="isClean")
GOALS["pick_heat_then_place_in_recep"] = _PROCESSED_GOAL.format(able="heatable", state="isHot")
GOALS["pick_cool_then_place_in_recep"] = _PROCESSED_GOAL.format(able="coolable", state="isCool")


def problem_text(scene: Scene, vocab: Vocabulary, name: str) -> str:
    """The ``(define (problem ...))`` text of ``scene``: declarations, initial facts, goal."""
    ind = "        "
    decl = ["agent1 - agent"]
    decl += [f"{t}Type - otype" for t in vocab.object_types]
    decl += [f"{t}Type - rtype" for t in vocab.receptacle_types]
    decl += [f"{o} - object" for o in sorted(scene.objects)]
    decl += [f"{r} - receptacle" for r in sorted(scene.receptacles)]
    decl += [f"{loc} - location" for loc in sorted(scene.locations)]

    init = [f"(atLocation agent1 {scene.start})"]
    recs = [scene.receptacles[r] for r in sorted(scene.receptacles)]
    objs = [scene.objects[o] for o in sorted(scene.objects)]
    init += [f"(receptacleType {r.rid} {r.rtype}Type)" for r in recs]
    init += [f"(openable {r.rid})" for r in recs if r.openable]
    init += [f"(receptacleAtLocation {r.rid} {r.location})" for r in recs]
    for o in objs:
        init.append(f"(objectType {o.oid} {o.otype}Type)")
        init += [f"({p} {o.oid})" for p in o.properties]
    init += [f"(inReceptacle {o.oid} {o.receptacle})" for o in objs if o.receptacle]
    init += [f"(objectAtLocation {o.oid} {o.location})" for o in objs]
    present = {o.otype for o in objs}  # like the real data: only types present in the scene
    for rtype in sorted({r.rtype for r in recs}):
        allowed = vocab.can_contain.get(rtype, frozenset()) & present
        init += [f"(canContain {rtype}Type {otype}Type)" for otype in sorted(allowed)]
    goal = GOALS[scene.task_type].format(obj=scene.target, recep=scene.destination)
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n"
        + "".join(f"{ind}{d}\n" for d in decl)
        + ")\n(:init\n"
        + "".join(f"{ind}{f}\n" for f in init)
        + ")\n"
        + goal
        + "\n)\n"
    )
