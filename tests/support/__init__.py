"""Test machinery shared by more than one test suite and not part of the product (the cut
proxy of the fault tests, `tests.support.proxy`)."""
