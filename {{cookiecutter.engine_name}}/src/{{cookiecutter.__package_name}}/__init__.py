"""{{ cookiecutter.description }}"""

# The id the engine answers to when run locally (Chariot's own id reaches it at deploy time; see README): what
# `python -m {{ cookiecutter.__package_name }}`, its client and `python -m chariot_support.evaluate` use by default.
DEFAULT_MODEL_ID = "{{ cookiecutter.model_id }}"
