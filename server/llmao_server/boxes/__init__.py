"""The box API's face: what a box calls (``/vllm/config``, ``/vllm/applied``, ``/vllm/turn``,
``/vllm/cert``) and the rules those calls run (bindings, turns, applied reports, certificates),
which the admin API and the dashboard also apply for the controller and the operators."""
