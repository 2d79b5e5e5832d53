from reverse import reverse


def test_reverse():
    assert reverse("abc") == "cba"


def test_empty():
    assert reverse("") == ""
