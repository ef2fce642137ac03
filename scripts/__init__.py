"""The ``graspsim`` command-line interface (thin verbs over library functions)."""
