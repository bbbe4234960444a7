"""`python -m chariot_support.client`: send images to an engine as a Chariot request, print the results as a table
or draw them on the images. Needs none of MLServer."""
