"""The admin API's face: ``/admin/api/…``, which reconcile and the push path call with the
admin token."""
