"""Standard-library-only verl reward functions.

verl loads a reward by file path (``custom_reward_function.path``), yet a reward here can import
its shared helpers as ``from rewards import _text``: ``uv sync`` installs this folder as a
package (pyproject's ``packages``), so the import works in every process of the project's
environment, Ray workers included (scripts/ray_cluster.sh requires the same sync on every node).
"""
