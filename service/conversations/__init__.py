"""The Conversations API's use-cases over the `Conversations` port."""
