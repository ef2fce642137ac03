"""Shipped data, installed as the package ``graspsim.data`` (pyproject.toml maps it to this folder).

Background photos (``backgrounds/``), the foreign-render transfer sets (``transfer/``) and the sample image set
(``sample_real/``). Code finds them through :func:`graspsim.vision.backgrounds.data_path`, which works for an editable
install, a wheel and a source checkout alike.
"""
