"""Admission: everything that decides whether a spec may run, before anything is stored.

``parse`` turns untrusted JSON into an ``ExperimentSpec`` (``envs``: the env part's checks);
``budget`` holds it to the structural bounds and ``memory``'s estimate of its peak memory;
``match_fit`` says whether a checkpoint can take a team's seats in a match; ``schema`` publishes
what ``parse`` accepts as JSON Schema. Pure: no framework, web or database import.
"""
